"""IPv6 per-interface state as OPNsense/FreeBSD has it: nd6 IFDISABLED.

Why it matters (the 000 page): OPNsense leaves IPv6 disabled (`ifdisabled`) on a port
with no IPv6 address; the offload path hands a tagged inner IPv6 packet to the
association's port, so on such a port the appliance's own ping6 fails with
`sendmsg: Network is down` (nd6_resolve -> ENETDOWN) until `ifconfig IF inet6
-ifdisabled`.  Linux has no such switch that keeps routes working, so the state is:
- the kernel's disable_ipv6=1 always means disabled;
- else an explicit `ifconfig IF inet6 [-]ifdisabled` recorded in DIR/nd6.json;
- else OPNsense's default: disabled iff the interface has no non-link-local IPv6 address.
"""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess

from ipsec_hil_twin.machinery.runtime import read_json, write_json_atomic

TYPE_CHECKING = False  # typing is not imported at run time: every emulated command pays for its imports
if TYPE_CHECKING:
    from typing import Any

IP = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if os.path.exists(p)), "/sbin/ip")


def _kernel_disabled(ifname: str) -> bool:
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6") as fh:
            return fh.read().strip() == "1"
    except OSError:
        return False


def _has_ipv6(link: dict[str, Any]) -> bool:
    for a in link.get("addr_info", []):
        if a.get("family") == "inet6" and not ipaddress.ip_address(a["local"]).is_link_local:
            return True
    return False


def links() -> list[dict[str, Any]]:
    r = subprocess.run([IP, "-j", "addr", "show"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or "ip addr show failed")
    return json.loads(r.stdout or "[]")


def recorded(hd) -> dict[str, bool]:
    data = read_json(hd.path / "nd6.json", default={}) if hd is not None else {}
    return data if isinstance(data, dict) else {}


def ifdisabled(hd, link: dict[str, Any]) -> bool:
    name = link["ifname"]
    if _kernel_disabled(name):
        return True
    rec = recorded(hd)
    if name in rec:
        return bool(rec[name])
    if name == "lo":
        return False
    return not _has_ipv6(link)


def set_ifdisabled(hd, ifname: str, disabled: bool) -> None:
    """`ifconfig IF inet6 [-]ifdisabled`: record it; re-enable the kernel's IPv6 if needed."""
    if not disabled and _kernel_disabled(ifname):
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6", "w") as fh:
            fh.write("0")
    rec = recorded(hd)
    rec[ifname] = disabled
    write_json_atomic(hd.path / "nd6.json", rec)


def egress_ifname(dst: str) -> str | None:
    r = subprocess.run([IP, "-j", "-6", "route", "get", dst], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    info = (json.loads(r.stdout or "[]") or [{}])[0]
    return info.get("dev")
