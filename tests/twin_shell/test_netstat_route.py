"""`netstat -r` of the emulated appliance: FreeBSD 14's routing table from the namespace's routes.

The appliance (conftest, a module of its own here) gets one route of each kind an
operator meets, through the appliance's own `route` command: a default route per family
(Linux routes, `UGS`), a host route (`UGHS`) and an inner prefix inside the engine
double's SA selectors (the engine's route: listed from its status). Its lan port's
link-local address is fixed (fe80::77:1) so the capture repeats; interface indexes are
the namespace's own, so the goldens are compared with `link#N` as a shape and each row's
index is checked against the interface it names. Goldens and their provenance:
tests/twin_shell/golden/netstat_route/README.md.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from ipsec_hil_twin.fbsd.netstat import USAGE

pytestmark = pytest.mark.needs_root

GOLDEN = Path(__file__).resolve().parent / "golden" / "netstat_route"
WRITE = os.environ.get("TWIN_GOLDEN_WRITE") == "1"
"""TWIN_GOLDEN_WRITE=1: write the captures instead of comparing (read them before committing)."""
LINK = re.compile(r"link#\d+ *")
"""A link#N gateway and the padding after it: the index's digits vary from run to run (the
kernel numbers every veth it ever made), the column's width does not."""


@pytest.fixture(scope="module")
def routed(appliance):
    """The appliance with its routes set as an operator would (and a fixed link-local)."""
    for args in (("-6", "addr", "flush", "dev", "lan", "scope", "link"),
                 ("addr", "add", "fe80::77:1/64", "dev", "lan", "nodad")):
        subprocess.run(["ip", "-n", appliance.ns, *args], check=True, capture_output=True)
    for cmd in ("route add default 10.78.0.2", "route -6 add default fd77::2",
                "route add -host 10.78.0.9 10.78.0.2", "route add -net 10.88.0.0/24 10.77.0.2"):
        r = appliance.run(cmd)
        assert r.status == 0, (cmd, r.err)
    assert {"dst": "10.88.0.0/24", "gateway": "10.77.0.2"} in appliance.engine.routes
    return appliance


def _ifindex(ns: str) -> dict[str, int]:
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show"], check=True, capture_output=True, text=True).stdout
    return {("lo0" if l["ifname"] == "lo" else l["ifname"]): l["ifindex"] for l in json.loads(out)}


def _golden(name: str, text: str) -> str:
    path = GOLDEN / name
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path.read_text()


def _same_shape(got: str, name: str) -> None:
    def index_free(text: str) -> str:  # link#1200 and link#12 in one column read alike
        return LINK.sub(lambda m: "link#N" + (" " * max(1, len(m.group()) - 6) if m.group().endswith(" ") else ""),
                        text)

    assert index_free(got) == index_free(_golden(name, got)), got


@pytest.mark.parametrize("command, golden", [
    ("netstat -rn", "twin-rn.txt"),
    ("netstat -rnW", "twin-rnW.txt"),
    ("netstat -r", "twin-r.txt"),
])
def test_text_is_freebsd_14s_table(routed, command, golden):
    """route.c's columns (18/18, IPv6 numeric 33/29, flags 6, Netif 8 or -W's 10 and Nhop#/Mtu),
    `link#N` for routes without a gateway, own addresses `UHS` on lo0 (127.0.0.1 `UH`), a
    link-local address scoped by the outgoing interface, and without -n `localhost` and the
    columns cut to their widths: the golden capture, line for line."""
    r = routed.run(command)
    assert (r.err, r.status) == ("", 0)
    _same_shape(r.out, golden)


def test_rows_name_the_namespaces_interfaces_and_the_routes_set(routed):
    index = _ifindex(routed.ns)
    four, six = ({line.split()[0]: line.split()[1:4] for line in part.splitlines()[2:]}
                 for part in routed.run("netstat -rn").out.split("\n\n")[1:])
    rows = {**four, **six}
    lo, lan, wan = (f"link#{index[n]}" for n in ("lo0", "lan", "wan"))
    assert four["default"] == ["10.78.0.2", "UGS", "wan"] and six["default"] == ["fd77::2", "UGS", "lan"]
    assert rows["10.88.0.0/24"] == ["10.77.0.2", "UGS", "lan"]  # the engine's route
    assert rows["10.78.0.9"] == ["10.78.0.2", "UGHS", "wan"]
    assert rows["10.77.0.0/24"] == [lan, "U", "lan"] and rows["10.78.0.0/24"] == [wan, "U", "wan"]
    assert rows["10.77.0.1"] == [lo, "UHS", "lo0"] and rows["127.0.0.1"] == [lo, "UH", "lo0"]
    assert rows["fe80::%lan/64"] == [lan, "U", "lan"] and rows["fe80::77:1%lo0"] == [lo, "UHS", "lo0"]
    assert not any("esp0" in v or "127.0.0.0" in k for k, v in rows.items())


def test_family_options_keep_one_family(routed):
    full = routed.run("netstat -rn").out
    six = full.split("\nInternet6:\n")[1]
    for command in ("netstat -rn -6", "netstat -rnf inet6", "netstat -r -n -f inet6", "netstat -rn4 -f inet6"):
        r = routed.run(command)
        assert (r.out, r.err, r.status) == ("Routing tables\n\nInternet6:\n" + six, "", 0), command
    four = routed.run("netstat -rn -4")
    assert four.out == full.split("\nInternet6:\n")[0] and four.status == 0
    assert routed.run("netstat -rn -f link").out == "Routing tables\n"


def test_libxo_json_has_freebsds_keys(routed):
    """route.c/route_netlink.c's libxo keys inside main.c's `statistics` container: per family
    `address-family` and `rt-entry`s of destination, gateway, flags, flags_pretty, weight,
    nhop-kidx, interface-name (-W: nhop, mtu); no `__version` (FreeBSD 14 sets none)."""
    r = routed.run("netstat -rn --libxo json")
    assert (r.err, r.status) == ("", 0)
    _same_shape(r.out, "twin-rn.json")
    doc = json.loads(r.out)
    families = doc["statistics"]["route-information"]["route-table"]["rt-family"]
    assert [f["address-family"] for f in families] == ["Internet", "Internet6"]
    entry = next(e for e in families[0]["rt-entry"] if e["destination"] == "10.78.0.9")
    assert entry == {"destination": "10.78.0.9", "gateway": "10.78.0.2", "flags": "UGHS",
                     "flags_pretty": ["up", "gateway", "host", "static"], "weight": 1,
                     "nhop-kidx": entry["nhop-kidx"], "interface-name": "wan"}
    pretty = routed.run("netstat --libxo json,pretty -r -n")
    assert json.loads(pretty.out) == doc and pretty.out.startswith('{\n  "statistics": {\n')
    wide = json.loads(routed.run("netstat -rnW --libxo json").out)
    lan = next(e for e in wide["statistics"]["route-information"]["route-table"]["rt-family"][0]["rt-entry"]
               if e["destination"] == "10.77.0.0/24")
    assert lan["mtu"] == 1400 and list(lan)[-3:] == ["nhop", "mtu", "interface-name"]
    six = json.loads(routed.run("netstat -rn -6 --libxo json").out)
    assert [f["address-family"] for f in six["statistics"]["route-information"]["route-table"]["rt-family"]] \
        == ["Internet6"]


@pytest.mark.parametrize("command, err, status", [
    ("netstat -rny", "netstat: illegal option -- y\n" + USAGE, 1),
    ("netstat -r -f", "netstat: option requires an argument -- f\n" + USAGE, 1),
    ("netstat -r -f bogus", "netstat: bogus: unknown address family\n", 1),
    ("netstat -rn -F 1", "netstat: 1: invalid fib\n", 64),
    ("netstat -rn -F one", "netstat: one: invalid fib\n", 1),
    ("netstat -rs", "netstat: routing statistics (-rs) are not emulated on this appliance\n", 1),
])
def test_errors_are_freebsds(appliance, command, err, status):
    """main.c: getopt's complaint and the whole usage (exit 1); -f's and -F's own errors
    (routepr's invalid fib is EX_USAGE, 64); nothing on stdout."""
    r = appliance.run(command)
    assert (r.out, r.err, r.status) == ("", err, status)
