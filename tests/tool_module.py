"""A script of tools/ (no .py suffix) loaded as a module, so its tests call its functions."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(name: str, module_name: str) -> ModuleType:
    """tools/NAME as module MODULE_NAME (registered in sys.modules: dataclasses look their
    module up there)."""
    loader = importlib.machinery.SourceFileLoader(module_name, str(TOOLS / name))
    spec = importlib.util.spec_from_loader(module_name, loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    loader.exec_module(mod)
    return mod
