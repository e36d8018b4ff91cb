"""The fault matrix's data is complete and consistent (no root, no lab).

- for each model, every test function ``pytest -m MODEL`` selects from tests_hil/ has a
  row on that model, and every row's node is one that ``pytest -m MODEL`` collects: the
  guard that makes a new tests_hil function (or one newly run on a model) bring its cells;
- every cell names a registered fault with parameters the registry accepts, on an
  appliance of the virtual lab; child_never_up names a child the node's tunnel really has;
- every function's teeth on a model include a cell judged by its own assertion (not only
  bring-up errors);
- the strict verdict rule behaves (call-phase assertion with the words in its message;
  setup errors only for declared bring-up cells; a test's source lines do not count);
- the models are the hardware registry's (each emulated by the twin and the local end of a
  tunnel of the virtual lab), and each model's shard is an xdist work unit of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import matrix, runner

REPO = Path(__file__).resolve().parents[2]
VIRTUAL = REPO / "topologies" / "virtual.yaml"
#: The shards' models: the suite's hardware registry (matrix.models()), not a list kept here.
MODELS = tuple(matrix.models())


@pytest.fixture(scope="module")
def collected() -> dict[str, list[str]]:
    """{model: node ids of tests_hil/ that ``pytest -m MODEL`` collects} (no lab started)."""
    import os
    import subprocess
    import sys

    out = {}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTEST_ADDOPTS", None)
    for model in MODELS:
        res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "-m", model, f"--topology={VIRTUAL}", "tests_hil"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
        nodes = [ln.strip() for ln in res.stdout.splitlines() if ln.startswith("tests_hil/") and "::" in ln]
        assert res.returncode == 0 and nodes, (f"pytest -m {model} --collect-only tests_hil failed (exit "
                                               f"{res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
        out[model] = nodes
    return out


def _functions(nodes: list[str]) -> set[str]:
    return {n.removeprefix("tests_hil/").split("[", 1)[0] for n in nodes}


def test_every_registered_model_has_rows_a_twin_and_a_tunnel_in_the_virtual_lab():
    """A model is a registry entry, a twin personality and a topology block: with one of the
    three missing, its shard could not run (no lab, no node) -- said here, naming the file."""
    from ipsec_hil_twin.personality import PERSONALITIES

    assert MODELS, "the hardware registry has no model"
    local_ends = set(matrix.tunnel_models().values())
    for model in MODELS:
        assert model in PERSONALITIES, f"{model}: no twin personality (twin/ipsec_hil_twin/personality.py)"
        assert model in local_ends, (f"{model}: no tunnel of {VIRTUAL.name} has an appliance of this model as its "
                                     f"local end (a host block and a tunnel in topologies/virtual.yaml)")
    rowed = {r.model for r in matrix.rows()}
    assert rowed == set(MODELS), f"rows on models {sorted(rowed)}, the registry's models {MODELS}"


def test_each_models_shard_is_an_xdist_work_unit_of_its_own():
    """Under ``--dist loadfile`` (tools/run-selftests) the shards of test_fault_matrix.py go to
    separate workers, both at the start, while another file's items stay one unit: xdist's
    own scheduler, as tests/conftest.py makes it, fed the real collection of the matrix file
    and a second file (four workers, as run-selftests starts them)."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from tests.file_order import sharded_loadfile_scheduler
    from .shard import __all__ as shard_names

    shard_checks = [n for n in shard_names if n.startswith("test_")]  # the checks each shard runs

    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "tests/teeth/test_fault_matrix.py", "tests/teeth/test_fault_effects.py"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    collection = [ln.strip() for ln in res.stdout.splitlines() if "::" in ln]
    assert res.returncode == 0 and collection, res.stdout[-2000:] + res.stderr[-2000:]

    class Worker:
        shutting_down = False

        def __init__(self, n: int) -> None:
            self.sent: list[str] = []
            self.gateway = SimpleNamespace(id=f"gw{n}")

        def send_runtest_some(self, indices: list[int]) -> None:
            self.sent += [collection[i] for i in indices]

        def shutdown(self) -> None:
            self.shutting_down = True

    config = SimpleNamespace(getvalue=lambda name: {"tx": ["4*popen"]}[name],
                             option=SimpleNamespace(loadscopereorder=False))
    sched = sharded_loadfile_scheduler(config, None)
    workers = [Worker(n) for n in range(4)]
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, collection)
    sched.schedule()
    for model in MODELS:
        shard = [n for n in collection if n.startswith("tests/teeth/test_fault_matrix.py::") and n.endswith(f"[{model}]")]
        holders = [i for i, w in enumerate(workers) if set(shard) & set(w.sent)]
        assert len(shard) == len(shard_checks) and len(holders) == 1, f"shard {model}: its {len(shard)} items went to workers {holders}"
        assert set(shard) <= set(workers[holders[0]].sent), f"shard {model}: split across workers"
    shard_workers = {i for i, w in enumerate(workers) for n in w.sent if "test_fault_matrix.py" in n}
    assert len(shard_workers) == len(MODELS), f"the {len(MODELS)} shards started on workers {sorted(shard_workers)}"
    effects = [n for n in collection if "test_fault_effects.py" in n]
    assert effects and len({i for i, w in enumerate(workers) if set(effects) & set(w.sent)}) <= 1, \
        "another file's items must stay one unit (their module's lab)"


@pytest.mark.parametrize("model", MODELS)
def test_every_selected_function_has_a_row_on_its_model(collected, model):
    selected = _functions(collected[model])
    rows = {r.function for r in matrix.rows() if r.model == model}
    missing = sorted(selected - rows)
    assert not missing, (f"`pytest -m {model}` selects tests_hil functions with no row on {model} in "
                         f"tests/teeth/matrix.yaml (append an entry whose node is a {model} node): "
                         f"{missing}")
    assert not rows - selected, f"rows on {model} for functions `-m {model}` does not select: {sorted(rows - selected)}"


def test_every_row_node_is_collected_under_its_model(collected):
    for r in matrix.rows():
        assert r.node in collected[r.model], f"{r.node}: not a node `pytest -m {r.model}` collects (virtual topology)"
        assert r.cells, f"{r.function} on {r.model}: no fault breaks it (a gap must be a cell, not silence)"


def test_one_row_per_function_and_model():
    keys = [(r.function, r.model) for r in matrix.rows()]
    assert len(keys) == len(set(keys)), f"two rows for one (function, model): {sorted(k for k in keys if keys.count(k) > 1)}"
    names = [r.name for r in matrix.rows()]
    assert len(names) == len(set(names)), "two rows share one node"


def test_teeth_never_only_from_bring_up_errors():
    for r in matrix.rows():
        assert any(not c.setup_error for c in r.cells), (
            f"{r.function} on {r.model}: only bring-up cells; a function's teeth must include its own assertion")


def test_cells_name_registered_faults_on_lab_appliances():
    from ipsec_hil.lab.topology import load_topology
    from ipsec_hil.lab.expectations.hardware import REGISTRY as MODELS
    from ipsec_hil_twin.faults import REGISTRY, get_fault

    appliances = {h.name for h in load_topology(VIRTUAL, models=MODELS).appliances()}
    for r, c in matrix.all_cells():
        f = get_fault(c.fault.name)  # raises naming the known ones
        f.coerce(c.fault.kwargs)  # raises naming a bad parameter
        assert c.fault.host in appliances, f"{r.node}: {c.fault.label}: no appliance {c.fault.host!r}"
    assert {c.fault.name for _, c in matrix.all_cells()} <= set(REGISTRY)
    assert set(matrix.FRESH) <= set(REGISTRY)
    assert set(matrix.STATELESS) <= set(REGISTRY) and not set(matrix.STATELESS) & set(matrix.FRESH), (
        "STATELESS names unknown faults or faults that need a fresh tunnel")


def test_every_fault_has_a_cell_or_says_why_not():
    """Each model's shard judges only its own rows, so that every fault of the registry is
    run at all is decided here, on the table: a cell in a row without a declared gap, or an
    AWAITING_TEST entry with its reason -- never both."""
    from ipsec_hil_twin.faults import REGISTRY

    with_cells = {c.fault.name for r, c in matrix.all_cells() if not r.gap}
    missing = sorted(set(REGISTRY) - with_cells - set(matrix.AWAITING_TEST))
    assert not missing, f"faults with no cell in a row without a gap, nor listed in AWAITING_TEST: {missing}"
    assert set(matrix.AWAITING_TEST) <= set(REGISTRY), f"AWAITING_TEST names unknown faults: {sorted(set(matrix.AWAITING_TEST) - set(REGISTRY))}"


@pytest.mark.parametrize("model", MODELS)
def test_each_model_has_every_fault_or_says_why_not(model):
    """Issue 42: the matrix shows the same fault set on both models, or a reason per missing
    cell (matrix.yaml's ``absent`` entry, printed in the model's report) -- never both."""
    from ipsec_hil_twin.faults import REGISTRY

    have = {c.fault.name for r in matrix.rows(model) for c in r.cells}
    absent = {f: why for m, f, why in matrix.ABSENT if m == model}
    assert set(absent) <= set(REGISTRY), f"{model}: absent names unknown faults: {sorted(set(absent) - set(REGISTRY))}"
    both = sorted(have & set(absent))
    assert not both, f"{model}: faults with a cell AND an absent reason in tests/teeth/matrix.yaml: {both}"
    missing = sorted(set(REGISTRY) - have - set(absent) - set(matrix.AWAITING_TEST))
    assert not missing, (f"{model}: faults with no cell on this model and no reason in matrix.yaml's absent "
                         f"entry: {missing}")


@pytest.mark.parametrize("model", MODELS)
def test_every_fault_has_a_green_sample_on_each_model_or_says_why_not(collected, model):
    """The other half of "a fault breaks its test": for every fault a model's rows run, some
    cell states other tests of its configuration that must stay green under it (``green``),
    or why none can (``green_none``); each sample node is one ``pytest -m MODEL`` collects,
    never the cell's own test function."""
    faults = {c.fault.name for r in matrix.rows(model) for c in r.cells}
    sampled = {c.fault.name for r in matrix.rows(model) for c in r.cells if c.green or c.green_none}
    assert not faults - sampled, (f"{model}: faults with no green sample nor green_none in tests/teeth/matrix.yaml: "
                                  f"{sorted(faults - sampled)}")
    for r in matrix.rows(model):
        for c in r.cells:
            for g in c.green:
                assert g in collected[model], f"{r.node}: {c.fault.label}: green {g} is no node `pytest -m {model}` collects"
                assert g.split("[", 1)[0] != f"tests_hil/{r.function}", (
                    f"{r.node}: {c.fault.label}: green {g} is the cell's own test function")


def test_slow_first_stream_caps_below_the_shards_floor():
    """The shards' labs run every link at QUIET_RATE_MBIT (tests/teeth/shard.py); a
    slow_first_stream cap at or above the floor there (floor_margin x link) would leave its
    test passing. Checked on the data, so a change of the quiet rate names the cell."""
    from tests.lab_factory import QUIET_RATE_MBIT

    from ipsec_hil.lab.topology import load_topology
    from ipsec_hil.lab.expectations.hardware import REGISTRY, host_profile

    topo = load_topology(VIRTUAL, models=REGISTRY)
    cells = [(r, c) for r, c in matrix.all_cells() if c.fault.name == "slow_first_stream"]
    assert cells, "no slow_first_stream cell: this check checks nothing"
    for r, c in cells:
        floor = host_profile(topo.hosts[c.fault.host]).throughput_floor_mbit(QUIET_RATE_MBIT)
        assert c.fault.kwargs["mbit"] < floor, (
            f"{r.node}: {c.fault.label} caps at {c.fault.kwargs['mbit']} Mbit/s, not below the floor "
            f"{floor:g} of the shard's {QUIET_RATE_MBIT} Mbit/s links (tests/teeth/matrix.yaml)")


def test_child_never_up_names_a_child_of_the_nodes_tunnel():
    from ipsec_hil.fixtures import tunnel_cases
    from ipsec_hil.lab.provision import TunnelPlan, child_plans
    from ipsec_hil.lab.topology import load_topology
    from ipsec_hil.lab.expectations.hardware import REGISTRY

    topo = load_topology(VIRTUAL, models=REGISTRY)
    cases = {c.id: c for c in tunnel_cases(topo)}
    for r, c in matrix.all_cells():
        if c.fault.name != "child_never_up":
            continue
        case = cases[r.case_id]
        kids = [k.name for k in child_plans(TunnelPlan.from_topology(topo, case.tunnel), case.config)]
        assert c.fault.kwargs["child"] in kids, f"{r.node}: child {c.fault.kwargs['child']!r} not in {kids}"


def test_plan_runs_healthy_first_then_cells_then_samples_then_healthy():
    rows = matrix.rows()
    steps = runner.plan_steps(rows, healthy_runs=2)
    samples: dict[str, list[str]] = {}
    for r in rows:
        for c in r.cells:
            for g in c.green:
                samples.setdefault(runner.item_name(g), []).append(runner.green_tag(r, c))
    for r in rows:
        tags = [s["tag"] for s in steps[r.name]]
        after = ["healthy2"] if runner.healthy_runs_of(r, 2) == 2 else []
        assert tags == ["healthy1", *(c.fault.label for c in r.cells), *samples.get(r.name, []), *after], tags
        stateless = all(c.fault.name in matrix.STATELESS for c in r.cells) and not r.fresh
        assert (after == []) == stateless, f"{r.node}: a damage check after its cells iff a fault may leave state"
        for s, c in zip(steps[r.name][1:], r.cells):
            assert s["fresh"] == (r.fresh or c.fault.name in matrix.FRESH)
    extra = {n for n in samples if n not in {r.name for r in rows}}
    assert extra == {runner.item_name(g) for g in runner.green_nodes(rows)}
    for n in extra:  # a sample node that is no row: its sample runs, each with a fault on
        assert [s["tag"] for s in steps[n]] == samples[n] and all(s["fault"] for s in steps[n])


LEDGER = "appliance  counter  before  after  delta"


def test_judge_is_strict():
    f = matrix.fault("dut3300", "drop_every", n=50)
    counter = matrix.Cell(f, r"invariant broken: the peer's ESP input", ledger=True)
    ok = runner.NodeResult("failed", f"invariant broken: the peer's ESP input x\n{LEDGER}", "call",
                           "InvariantError", True)
    assert runner.judge(counter, ok) == (True, "")
    passed = runner.judge(counter, runner.NodeResult("passed"))
    assert not passed[0] and "got passed" in passed[1]
    # the words must be in the exception's message
    wrong = runner.judge(matrix.Cell(f, r"something else"), ok)
    assert not wrong[0] and "does not name the invariant" in wrong[1]
    no_ledger = runner.judge(counter, runner.NodeResult("failed", "invariant broken: the peer's ESP input x",
                                                        "call", "InvariantError", True))
    assert not no_ledger[0] and "without the ledger" in no_ledger[1]
    # not the test's own assertion: a lab error raised in the call phase
    lab_err = runner.NodeResult("failed", "invariant broken: the peer's ESP input", "call", "LabError", False)
    assert not runner.judge(matrix.Cell(f, r"the peer's ESP input"), lab_err)[0]
    # a failure in teardown is not the test's assertion either
    late = runner.NodeResult("error", "invariant broken: the peer's ESP input", "teardown", "AssertionError", True)
    assert not runner.judge(matrix.Cell(f, r"the peer's ESP input"), late)[0]
    # setup errors count only for cells that declare bring-up
    setup = runner.NodeResult("error", "tunnel lab: 0 of 1 children established", "setup", "ProvisionError")
    assert runner.judge(matrix.Cell(f, r"children established", setup_error=True), setup)[0]
    assert not runner.judge(matrix.Cell(f, r"children established"), setup)[0]
    # an expected failure (a known issue reproducing) is not teeth
    xf = runner.NodeResult("xfailed", "issue 531: first stream after boot", "call")
    assert not runner.judge(matrix.Cell(f, r"first stream after boot"), xf)[0]


def test_render_and_figures():
    row = matrix.rows()[0]
    own = next(c for c in row.cells if not c.setup_error)
    bring_up = next(c for c in row.cells if c.setup_error)
    m = runner.MatrixResult(rows=(row,), registry=(own.fault.name, bring_up.fault.name, "replay"),
                            selected={row.model: {row.function}})
    m.cells = [runner.CellOutcome(row, bring_up, runner.NodeResult("error", "0 of 1", "setup"), True, "")]
    m.healthy = [{row.name: runner.NodeResult("passed")}]
    assert m.per_model() == {row.model: (0, 1)}, "a bring-up error alone is no teeth"
    m.cells.append(runner.CellOutcome(row, own, runner.NodeResult("failed", "x", "call", "AssertionError", True),
                                      True, ""))
    assert m.per_model() == {row.model: (1, 1)} and m.uncovered() == []
    assert m.false_alarms() == [] and m.unnoticed_faults() == [], "a fault with no cell here is another shard's"
    replay = matrix.Cell(matrix.fault(own.fault.host, "replay"), r"replay")
    m.cells.append(runner.CellOutcome(row, replay, runner.NodeResult("passed"), False, "passed"))
    assert m.unnoticed_faults() == ["replay"], "a fault whose every cell passed is noticed by no test"
    text = runner.render(m)
    assert f"| {row.model} | 1 / 1 |" in text
    assert "faults noticed by no test: replay" in text
    m.healthy = [{row.name: runner.NodeResult("failed", "boom")}]
    assert [(i, n) for i, n, _ in m.false_alarms()] == [(1, row.node)]


@pytest.mark.parametrize("entry,message", [
    ("- node: test_x.py::test_y[lab-v4in4-gcm]\n  cells:\n  - {fault: replay, host: dut3300, expect: x, "
     "setup_eror: true}\n", "test_x.py::test_y[lab-v4in4-gcm]: a cell needs fault, host and expect"),
    ("- node: test_x.py::test_y[lab-v4in4-gcm]\n  cels: []\n", "expected node (FILE::FUNCTION[PARAMS]), cells"),
    ("- node: test_x.py::test_y\n  cells: []\n", "test_x.py::test_y: expected node"),
])
def test_matrix_file_checked(tmp_path, entry, message):
    """A misspelt key in matrix.yaml fails naming its node, not as a cell judged otherwise."""
    path = tmp_path / "matrix.yaml"
    path.write_text(entry)
    with pytest.raises(ValueError) as e:
        matrix.load_rows(path)
    assert message in str(e.value)


def test_split_balances_the_measured_seconds():
    """TEETH_PARTS: every row in exactly one part, each part keeps the rows' order, and
    the parts carry about equal measured seconds (tests/teeth/row_seconds.json)."""
    from .shard import load_row_seconds, row_key, split_rows

    seconds = load_row_seconds()
    for model in MODELS:
        rows = matrix.rows(model)
        order = [r.name for r in rows]
        for n in (2, 3):
            parts = split_rows(rows, n, healthy_runs=3, seconds=seconds)
            assert sorted(r.name for p in parts for r in p) == sorted(order)
            for p in parts:
                assert [r.name for r in p] == [x for x in order if x in {r.name for r in p}]
            load = [sum(seconds[row_key(r)] for r in p) for p in parts]
            biggest = max(seconds[row_key(r)] for r in rows)
            # longest-first greedy: no part more than the longest row above the lightest
            assert len(parts) == n and max(load) - min(load) <= biggest, f"{model}: parts of {load} s"


def test_every_row_has_measured_seconds():
    """A row the table lacks is split by a guess (its node runs at the median second a run):
    measure it. How: TEETH_WRITE_SECONDS=1 pytest tests/teeth/test_fault_matrix.py -k <model>."""
    from .shard import ROW_SECONDS, load_row_seconds, row_key

    seconds = load_row_seconds()
    missing = [row_key(r) for r in matrix.rows() if row_key(r) not in seconds]
    assert not missing, f"{ROW_SECONDS}: no seconds for {missing}"


def test_split_weighs_an_unmeasured_row_by_its_node_runs():
    from .shard import row_key, row_weights, split_rows

    rows = matrix.rows("xgs136")[:3]
    runs = [runner.healthy_runs_of(r, 3) + sum(1 + len(c.green) for c in r.cells) for r in rows]  # green samples run in the row's part
    # the first two measured at 1 and 3 s a run; the third, unmeasured, weighs its runs
    # at their median, 2 s a run
    seconds = {row_key(rows[0]): 1.0 * runs[0], row_key(rows[1]): 3.0 * runs[1]}
    assert row_weights(rows, 3, seconds) == {rows[0].name: runs[0], rows[1].name: 3.0 * runs[1],
                                             rows[2].name: 2.0 * runs[2]}
    assert row_weights(rows, 3) == {r.name: float(n) for r, n in zip(rows, runs)}  # nothing measured: 1 s a run
    seconds = {row_key(r): float(n) for r, n in zip(rows[:2], runs[:2])}
    parts = split_rows(rows, 2, healthy_runs=3, seconds=seconds)
    loads = sorted(sum(seconds.get(row_key(r), runner.healthy_runs_of(r, 3) + sum(1 + len(c.green) for c in r.cells))
                       for r in p) for p in parts)
    assert sum(loads) == sum(runs) and loads[1] - loads[0] <= max(runs)


def test_a_broken_row_seconds_file_names_itself(tmp_path):
    from .shard import load_row_seconds

    bad = tmp_path / "row_seconds.json"
    bad.write_text('{"seconds": {"xgs136 test_x[npu-v4in4-gcm]": "slow"}}')
    with pytest.raises(ValueError, match="row_seconds.json"):
        load_row_seconds(bad)


def test_merged_parts_read_as_one_run():
    rows = matrix.rows("xgs3300")
    a, b = rows[: len(rows) // 2], rows[len(rows) // 2:]

    def fake(part):
        cells = [runner.CellOutcome(r, c, runner.NodeResult("failed"), True, "") for r in part for c in r.cells]
        healthy = [{r.name: runner.NodeResult("passed") for r in part} for _ in range(3)]
        return cells, healthy, [f"left {part[0].name}"]

    cells, healthy, left = runner.merge_parts(rows, [fake(b), fake(a)])
    assert [c.row.name for c in cells] == [r.name for r in rows for _ in r.cells]
    assert len(healthy) == 3 and all(set(h) == {r.name for r in rows} for h in healthy)
    assert left == [f"left {b[0].name}", f"left {a[0].name}"]
