"""One Allure result for a run-level fact (a baseline comparison, candidate against parent).

Why: Allure shows tests; a verdict the run reaches after its tests (the gate, the merge
decision) has no test of its own, so it is written as one result file beside the tests'
(``{uuid}-result.json``) with its attachments. A stable ``historyId`` per fact makes
Allure's history show its trend across runs (e.g. one figure's candidate/parent ratio).
Write it from the controller's ``pytest_sessionfinish`` (after the workers).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Attachment:
    name: str
    content: bytes
    mime: str  # e.g. "text/markdown", "image/png"
    suffix: str  # e.g. "md", "png"


def write_result(alluredir: str | Path, *, name: str, full_name: str, history_id: str, status: str, message: str,
                 attachments: list[Attachment], suite: str, description: str = "",
                 parameters: dict[str, str] | None = None) -> Path:
    """Write the result and its attachments into ``alluredir``; returns the result file."""
    d = Path(alluredir)
    d.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    listed = []
    for a in attachments:
        source = f"{uuid.uuid4()}-attachment.{a.suffix}"
        (d / source).write_bytes(a.content)
        listed.append({"name": a.name, "source": source, "type": a.mime})
    result = {
        "uuid": str(uuid.uuid4()),
        "historyId": history_id,
        "name": name,
        "fullName": full_name,
        "status": status,
        "statusDetails": {"message": message},
        "stage": "finished",
        "start": now,
        "stop": now,
        "description": description,
        "attachments": listed,
        "parameters": [{"name": k, "value": v} for k, v in (parameters or {}).items()],
        "labels": [{"name": "suite", "value": suite}, {"name": "framework", "value": "pytest"}],
    }
    out = d / f"{result['uuid']}-result.json"
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return out
