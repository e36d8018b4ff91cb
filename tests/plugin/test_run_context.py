"""One run context (issue 39): the lab, the lab handle and the parts' state in one object.

What is checked here, without a lab: an xdist worker rebuilds the context from the one
input its controller wrote, parsing one lab file (the controller's virtual lab's resolved
file) and nothing else; the context is the only thing the plugin keeps in ``config.stash``
and the only place that knows about worker processes; the parts' phases run in the order
``parts_in_order`` states, not in an order tryfirst/trylast happen to give. (How many
times each process of a real ``pytest -n 2`` parses the lab file: tests/parallel.)
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import ipsec_hil.lab.topology as topology_files
from ipsec_hil.lab.expectations.hardware import REGISTRY
from ipsec_hil.context import Part, RunContext
from ipsec_hil.pytest_plugin import parts_in_order
from ipsec_hil.session import HilSession
from ipsec_hil.virtual_lab import VirtualLab

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin" / "ipsec_hil"
VIRTUAL = REPO / "topologies" / "virtual.yaml"


def test_a_worker_rebuilds_the_context_from_one_input_parsing_one_file(tmp_path, monkeypatch):
    """The controller started a virtual lab (its resolved file is the active topology); the
    worker's input is plain data, and the worker parses the resolved file once -- not the
    configured file, not twice -- and holds the same lab handle."""
    controller = RunContext.load(VIRTUAL)
    run_dir = tmp_path / "hil-t1"
    run_dir.mkdir()
    resolved = run_dir / "lab.resolved.yaml"
    shutil.copy(VIRTUAL, resolved)
    lab = VirtualLab(VIRTUAL, resolved, "hil-t1", run_dir)
    controller.activate(topology_files.load_topology(resolved, models=REGISTRY), lab=lab)
    data = json.loads(json.dumps(controller.to_workerinput(loadgroup=True)))  # plain data, as execnet carries it

    parsed: list[Path] = []
    real = topology_files.load_topology

    def counting(path, *args, **kwargs):
        parsed.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(topology_files, "load_topology", counting)
    worker = RunContext.from_workerinput(data)
    assert parsed == [resolved], parsed
    assert worker.worker and worker.loadgroup
    assert worker.active is not None and worker.active.source == resolved.resolve()
    assert worker.lab == lab and not worker.lab_owned  # the controller stops the lab, not a worker
    assert worker.configured is None  # the lab file as given is the controller's business
    assert worker.configured_path == VIRTUAL


def test_the_active_lab_does_not_change_once_sealed():
    """Tests are collected against the active topology; once the session sealed it (lab up,
    place claimed), swapping it would run them against another lab file."""
    ctx = RunContext.load(VIRTUAL)
    other = topology_files.load_topology(VIRTUAL, models=REGISTRY)
    ctx.activate(other)
    assert ctx.topology() is other
    ctx.seal()
    with pytest.raises(RuntimeError, match="cannot change once tests may run"):
        ctx.activate(topology_files.load_topology(VIRTUAL, models=REGISTRY))
    assert ctx.topology() is other


def test_a_lab_started_by_hand_is_the_handle_in_every_process(tmp_path):
    """``--topology RUN_DIR/lab.resolved.yaml`` of a running lab: the controller's context
    has the handle (faults, ``twin seq`` reach that lab); its workers get the same one."""
    run_dir = tmp_path / "hil-hand"
    run_dir.mkdir()
    text = VIRTUAL.read_text(encoding="utf-8").replace("    role: appliance\n",
                                                         "    role: appliance\n    mgmt: {address: 127.0.0.1}\n")
    resolved = run_dir / "lab.resolved.yaml"
    resolved.write_text(text, encoding="utf-8")
    controller = RunContext.load(resolved)
    assert controller.lab == VirtualLab(Path(""), resolved.resolve(), "hil-hand", run_dir.resolve())
    assert not controller.lab_owned  # the run did not start it: it does not stop it
    worker = RunContext.from_workerinput(json.loads(json.dumps(controller.to_workerinput(loadgroup=False))))
    assert worker.lab == controller.lab and worker.configured is worker.active


def _calls_in(path: Path, names: set[str]) -> list[str]:
    """Where a module uses any of ``names`` (as a name, an attribute or a string: ``hasattr(config,
    "workerinput")``), as 'file:line name'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                else node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
        if name in names:
            found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    return found


def test_the_context_is_the_only_per_run_state_in_config_stash():
    keys = [hit for p in sorted(PLUGIN.rglob("*.py")) for hit in _calls_in(p, {"StashKey"})]
    assert keys == [f"plugin/ipsec_hil/context.py:{_line_of(PLUGIN / 'context.py', 'CONTEXT_KEY = ')} StashKey"], keys


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


def test_only_the_context_and_the_session_know_about_worker_processes():
    """No part guards against xdist workers itself: which process runs a phase is decided
    where the session objects are registered."""
    allowed = {"context.py", "session.py", "pytest_plugin.py"}
    hits = [hit for p in sorted(PLUGIN.glob("*.py")) if p.name not in allowed
            for hit in _calls_in(p, {"workerinput", "is_worker", "holds_places_per_worker"})]
    assert not hits, hits
    decorated = [f"{p.name}:{n.lineno}" for p in sorted(PLUGIN.glob("*_plugin.py")) if p.name != "pytest_plugin.py"
                 for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.keyword)
                 and n.arg in ("tryfirst", "trylast")]
    assert not decorated, f"a part's hook order by tryfirst/trylast: {decorated}"


class _Recorder(Part):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    @classmethod
    def from_config(cls, config: pytest.Config) -> Part:
        raise AssertionError("not used: the test makes its parts itself")

    def finish(self, ctx, session) -> None:
        self.log.append(f"finish {self.name}")

    def close(self, ctx) -> None:
        self.log.append(f"close {self.name}")


def test_the_controller_runs_the_parts_phases_in_the_parts_order():
    assert [kind.name for kind in parts_in_order()] == ["lease", "recovery", "preflight", "comparison", "driver", "gate", "timeshare"]
    log: list[str] = []
    ctx = RunContext(None, None, parts=tuple(_Recorder(n, log) for n in ("first", "second", "third")))
    config = SimpleNamespace(getoption=lambda *a, **k: False)
    run = HilSession(config, ctx)  # type: ignore[arg-type]
    run.pytest_sessionfinish(SimpleNamespace(exitstatus=0, config=config), 0)  # type: ignore[arg-type]
    run.pytest_unconfigure(config)  # type: ignore[arg-type]
    assert log == ["finish first", "finish second", "finish third", "close first", "close second", "close third"]



def test_the_run_begins_and_ends_the_process_records():
    """The library's process-wide records (leases lost, fences, time share, dead runs found,
    the last load) are the run's once it began them; a profiles file's model is the run's
    too: gone from the registry when the run ends (pytester runs many runs in one process)."""
    import dataclasses

    from ipsec_hil.context import ProcessRecords
    from ipsec_hil.lab.measuring import quiet
    from ipsec_hil.lab.remote import fence
    from ipsec_hil.lab.sharing.holds import HOLDS

    fence.fence("gw-earlier", "an earlier run's loss")
    quiet.load_ended(1.0)
    process = ProcessRecords.begin()
    assert process.holds is HOLDS and not HOLDS.losses
    assert fence.fenced("gw-earlier") is None and quiet.last_load_end() == float("-inf")
    process.add_model(dataclasses.replace(REGISTRY.get("xgs136"), model="xgs9136"), source="extra.yaml")
    process.add_model(REGISTRY.get("xgs136"), source="ipsec_hil.lab.expectations.hardware")  # the suite's own
    assert "xgs9136" in REGISTRY.names()
    process.end()
    assert "xgs9136" not in REGISTRY.names() and "xgs136" in REGISTRY.names()
