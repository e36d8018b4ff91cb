"""The acceptance suite selects configurations by properties, never by names (issue 42).

A real lab file names its appliances, ports and tunnels as its owners like; a test that
selected "the tunnels called lab and npu" would skip there with a reason nobody reads, a
silent hole in the gate. So the default lab (topologies/virtual.yaml) is copied with every
host, port and tunnel renamed (the references in links, tunnel ends and inject blocks
follow), the acceptance suite is COLLECTED against both files (no lab is started), and
the selection must be the same: the same test functions times the same configurations
(tunnel names mapped back through the renaming), and nothing skipped on the renamed lab
that runs on the default one. Collection only: two inner pytest processes at once, a few
seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from tests.lab_factory import REPO, subprocess_env

VIRTUAL = REPO / "topologies" / "virtual.yaml"


def renamed_topology(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """``data`` (a lab file's YAML) with every host, port and tunnel renamed.

    Returns the renamed data, the tunnel map (new -> old) and the host map (new -> old).
    The new names are in the reverse order of the old ones and share no text with them, so
    neither a name nor an order the tests might lean on survives.
    """
    hosts = sorted(data["hosts"])
    host_new = {old: f"box{len(hosts) - i}" for i, old in enumerate(hosts)}
    port_new: dict[tuple[str, str], str] = {}
    out_hosts = {}
    for old in hosts:
        h = dict(data["hosts"][old])
        ports = sorted(h["ports"])
        port_new.update({(old, p): f"if{len(ports) - i}" for i, p in enumerate(ports)})
        h["ports"] = {port_new[(old, p)]: v for p, v in h["ports"].items()}
        out_hosts[host_new[old]] = h

    def hp(ref: str) -> str:
        host, port = ref.split(".", 1)
        return f"{host_new[host]}.{port_new[(host, port)]}"

    links = [{**link, "a": hp(link["a"]), "b": hp(link["b"])} for link in data.get("links", [])]
    bench = next(n for n, h in data["hosts"].items() if h.get("role") == "bench")
    tunnels = sorted(data["tunnels"])
    tunnel_new = {old: f"conn{len(tunnels) - i}" for i, old in enumerate(tunnels)}
    out_tunnels = {}
    for old in tunnels:
        t = dict(data["tunnels"][old])
        for side in ("local", "remote"):
            end = dict(t[side])
            end["port"] = port_new[(end["host"], end["port"])]
            end["lan"] = port_new[(end["host"], end["lan"])]
            end["host"] = host_new[end["host"]]
            t[side] = end
        if t.get("inject") and t["inject"].get("port"):
            t["inject"] = {**t["inject"], "port": port_new[(bench, t["inject"]["port"])]}
        out_tunnels[tunnel_new[old]] = t
    renamed = {**data, "hosts": out_hosts, "links": links, "tunnels": out_tunnels}
    return renamed, {v: k for k, v in tunnel_new.items()}, {v: k for k, v in host_new.items()}


def _collect(topology: Path, dump: Path) -> subprocess.Popen:
    """An inner ``pytest --collect-only`` of the acceptance suite against ``topology``."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-p", "tests.acceptance.selection_dump", f"--topology={topology}", "tests_hil"]
    return subprocess.Popen(cmd, cwd=REPO, env=subprocess_env(HIL_SELECTION_DUMP=str(dump)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _rows(proc: subprocess.Popen, dump: Path, what: str) -> list[dict[str, Any]]:
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0 and dump.is_file(), f"collection on {what} failed (exit {proc.returncode}):\n{out[-3000:]}"
    return json.loads(dump.read_text())


def _selection(rows: list[dict[str, Any]], tunnel_back: dict[str, str]) -> Counter:
    """(function, tunnel in the default lab's names, configuration, model, rest, skip reason) counted."""
    sel: Counter = Counter()
    for r in rows:
        case = r["case"]
        if case is not None:
            case = (tunnel_back.get(case[0], case[0]), case[1], case[2])
        sel[(r["function"], case, r["rest"], r["skip"])] += 1
    return sel


def test_renamed_lab_selects_the_same_configurations(tmp_path):
    """Every host, port and tunnel renamed: the same functions x configurations, none newly skipped."""
    data = yaml.safe_load(VIRTUAL.read_text())
    renamed, tunnel_back, host_back = renamed_topology(data)
    assert set(tunnel_back).isdisjoint(data["tunnels"]) and set(host_back).isdisjoint(data["hosts"])
    copy = tmp_path / "renamed.yaml"
    copy.write_text(yaml.safe_dump(renamed, sort_keys=False))
    procs = {what: (_collect(path, tmp_path / f"{what}.json"), tmp_path / f"{what}.json")
             for what, path in (("default", VIRTUAL), ("renamed", copy))}
    default = _rows(*procs["default"], what=str(VIRTUAL))
    renamed_rows = _rows(*procs["renamed"], what=f"the renamed copy {copy}")
    before, after = _selection(default, {}), _selection(renamed_rows, tunnel_back)
    assert len(default) > 100, f"the default lab's collection holds {len(default)} items: not the acceptance suite"
    skipped = sorted({(f, r) for (f, c, _, r) in before if r is not None})
    assert not skipped, f"on the default lab itself these skip at collection: {skipped}"
    lost, gained = before - after, after - before
    fmt = "\n".join
    assert not lost and not gained, (
        f"renaming every host, port and tunnel changed the selection ({len(default)} items on the default lab, "
        f"{len(renamed_rows)} on the renamed copy): a test picks its configurations by a name\n"
        f"  selected on the default lab only (or skipped on the renamed one):\n"
        + fmt(f"    {f} {c} {rest or ''} {'SKIPPED: ' + s if s else ''}" for (f, c, rest, s) in sorted(lost, key=str))
        + "\n  on the renamed lab only:\n"
        + fmt(f"    {f} {c} {rest or ''} {'SKIPPED: ' + s if s else ''}" for (f, c, rest, s) in sorted(gained, key=str)))


def test_lifetimes_is_a_property_criterion():
    """``lifetimes="rekey"|"expiry"`` picks the short-lived tunnels by what their children do;
    without it no test meets them; a value outside the kinds is refused naming them."""
    import pytest

    from ipsec_hil.lab.cases import LIFETIME_KINDS, lifetime_kind, tunnel_cases
    from ipsec_hil.lab.expectations.hardware import REGISTRY
    from ipsec_hil.lab.topology import load_topology

    topo = load_topology(VIRTUAL, models=REGISTRY)
    kinds = {name: lifetime_kind(t.lifetimes) for name, t in topo.tunnels.items()}
    for kind in LIFETIME_KINDS:
        picked = {c.tunnel for c in tunnel_cases(topo, lifetimes=kind)}
        assert picked == {n for n, k in kinds.items() if k == kind} and picked, (kind, picked, kinds)
        assert {c.model for c in tunnel_cases(topo, lifetimes=kind)} == set(REGISTRY.names()), \
            f"lifetimes={kind!r}: every model of the registry has such a tunnel in the default lab"
    assert not {c.tunnel for c in tunnel_cases(topo)} & {n for n, k in kinds.items() if k}
    with pytest.raises(ValueError, match="lifetimes: expected one of"):
        tunnel_cases(topo, lifetimes="short")
