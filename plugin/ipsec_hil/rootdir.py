"""``--topology FILE`` with a lab file outside the repository: keep the suite's rootdir.

Why this exists: pytest decides its rootdir and ini file before it loads any plugin
(``Config.parse`` calls ``determine_setup`` with the command line's positional-looking
arguments, src/_pytest/config/__init__.py). At that moment ``--topology`` is not a known
option yet, so in ``pytest -m xgs136 --topology ~/labs/xgs.yaml`` the lab file counts as a
test path: the rootdir becomes ~/labs, pytest.ini is not read (no testpaths, no
strict_markers) and the repository's conftest is never loaded. By
``pytest_load_initial_conftests`` the suite's options are known (the plugin is loaded from
its ``pytest11`` entry point), so the arguments without the option's value are known too:
this hook determines the setup again from those and, when it differs, puts the right
rootdir, ini file and ``addopts`` in place -- before any conftest or test path is read.

It touches pytest's private setup (``_rootpath``, ``_inipath``, ``_inicfg``): there is no
public way to correct a rootdir after the fact. Nothing is done when the user fixed the
setup (``--rootdir``, ``-c``) or when the result is the same.
"""

from __future__ import annotations

import logging

import pytest
from _pytest.config.findpaths import determine_setup

log = logging.getLogger(__name__)


def redetermine_setup(early_config: pytest.Config, args: list[str], option_dest: str) -> bool:
    """Determine rootdir/ini again without ``option_dest``'s value among the paths; True if changed."""
    ns = early_config.known_args_namespace
    if getattr(ns, option_dest, None) is None or ns.rootdir or ns.inifilename:
        return False
    rootpath, inipath, inicfg, ignored = determine_setup(
        inifile=None,
        override_ini=ns.override_ini,
        args=ns.file_or_dir,
        rootdir_cmd_arg=None,
        invocation_dir=early_config.invocation_params.dir,
    )
    if rootpath == early_config.rootpath and inipath == early_config.inipath:
        return False
    log.debug("--%s: rootdir %s -> %s (ini %s)", option_dest, early_config.rootpath, rootpath, inipath)
    early_config._rootpath = rootpath
    early_config._inipath = inipath
    early_config._inicfg = inicfg
    early_config._ignored_config_files = ignored
    early_config._inicache.clear()
    early_config._parser.extra_info["rootdir"] = str(rootpath)
    early_config._parser.extra_info["inifile"] = str(inipath)
    ns.confcutdir = str(inipath.parent if inipath is not None else rootpath)
    # The ini's addopts were not applied (no ini had been found): apply them now, first,
    # as pytest does, so the command line still wins.
    args[:] = [*early_config.getini("addopts"), *args]
    return True
