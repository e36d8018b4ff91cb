"""ifconfig(8) of FreeBSD 14 from the namespace's real interfaces (`ip -j addr`).

nd6 IFDISABLED follows OPNsense (ipsec_hil_twin.fbsd.nd6): set on a port without an IPv6 address
or with the kernel's IPv6 disabled, cleared by `ifconfig IF inet6 -ifdisabled`.
The engine's TUN (esp0) is not part of the appliance and is hidden; enc0 is shown.
"""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import nd6

IP = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if os.path.exists(p)), "/sbin/ip")
"""iproute2 by absolute path: PATH starts with DIR/bin (never recurse into a wrapper)."""

HIDDEN = {"esp0"}
ND6_PERFORMNUD, ND6_IFDISABLED, ND6_AUTO_LINKLOCAL = 0x1, 0x8, 0x20


def _ip_json(args: list[str]) -> list[dict]:
    r = subprocess.run([IP, "-j"] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    return json.loads(r.stdout or "[]")


def nd6_flags(hd, link: dict) -> int:
    flags = ND6_PERFORMNUD | ND6_AUTO_LINKLOCAL
    if nd6.ifdisabled(hd, link):
        flags |= ND6_IFDISABLED
    return flags


def nd6_line(flags: int) -> str:
    names = [n for bit, n in ((0x1, "PERFORMNUD"), (0x2, "ACCEPT_RTADV"), (0x4, "PREFER_SOURCE"),
                              (0x8, "IFDISABLED"), (0x10, "DONT_SET_IFROUTE"), (0x20, "AUTO_LINKLOCAL"),
                              (0x40, "NO_RADR"), (0x80, "NO_PREFER_IFACE"), (0x100, "NO_DAD"))
             if flags & bit]
    return f"\tnd6 options={flags:x}<{','.join(names)}>"


def if_flags(link: dict) -> tuple[int, list[str]]:
    fl = set(link.get("flags", []))
    bits = []
    val = 0
    up = "UP" in fl
    if up:
        val |= 0x1; bits.append("UP")
    if "BROADCAST" in fl:
        val |= 0x2; bits.append("BROADCAST")
    if "LOOPBACK" in fl:
        val |= 0x8; bits.append("LOOPBACK")
    if "POINTOPOINT" in fl:
        val |= 0x10; bits.append("POINTOPOINT")
    if up and link.get("operstate") in ("UP", "UNKNOWN"):
        val |= 0x40; bits.append("RUNNING")
    if link.get("link_type") == "ether":
        val |= 0x800; bits.append("SIMPLEX")
    if "MULTICAST" in fl:
        val |= 0x8000; bits.append("MULTICAST")
    return val, bits


def fbsd_name(name: str) -> str:
    return "lo0" if name == "lo" else name


def render(link: dict, hd=None) -> list[str]:
    name = link["ifname"]
    val, bits = if_flags(link)
    lines = [f"{fbsd_name(name)}: flags={val:x}<{','.join(bits)}> metric 0 mtu {link.get('mtu', 1500)}"]
    if link.get("link_type") == "ether":
        lines.append("\toptions=8<VLAN_MTU>")
        lines.append(f"\tether {link.get('address')}")
    for a in link.get("addr_info", []):
        if a.get("family") == "inet":
            net = ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
            line = f"\tinet {a['local']} netmask 0x{int(net.netmask):08x}"
            bcast = a.get("broadcast")
            if not bcast and "BROADCAST" in link.get("flags", []) and net.prefixlen < 31:
                bcast = str(net.broadcast_address)  # FreeBSD always shows it on broadcast links
            if bcast:
                line += f" broadcast {bcast}"
            lines.append(line)
        elif a.get("family") == "inet6":
            addr = a["local"]
            extra = ""
            if addr.lower().startswith("fe80"):
                addr += f"%{fbsd_name(name)}"
                extra = f" scopeid 0x{link.get('ifindex', 1):x}"
            flags = ""
            if a.get("tentative"):
                flags += " tentative"
            if a.get("dadfailed"):
                flags += " duplicated"
            lines.append(f"\tinet6 {addr} prefixlen {a['prefixlen']}{flags}{extra}")
    if link.get("link_type") == "ether":
        lines.append("\tmedia: Ethernet autoselect (1000baseT <full-duplex>)")
        lines.append(f"\tstatus: {'active' if link.get('operstate') == 'UP' else 'no carrier'}")
    lines.append(nd6_line(nd6_flags(hd, link)))
    return lines


def enc0(ipsec_loaded: bool) -> list[str]:
    if ipsec_loaded:
        head = "enc0: flags=41<UP,RUNNING> metric 0 mtu 1536"
    else:
        head = "enc0: flags=0<> metric 0 mtu 1536"
    return [head, "\tgroups: enc", nd6_line(ND6_PERFORMNUD | ND6_IFDISABLED | ND6_AUTO_LINKLOCAL)]


def main(argv: list[str]) -> int:
    args = [a for a in argv]
    if args and args[0] == "-a":
        args = args[1:]
    if len(args) >= 2:
        return configure(args)
    try:
        links = [l for l in _ip_json(["addr", "show"]) if l.get("ifname") not in HIDDEN]
    except RuntimeError as exc:
        c.err("ifconfig", str(exc))
        return 1
    try:
        hd = c.host_dir()
        ipsec = c.module_loaded(c.load_state(hd), "ipsec")
    except Exception:  # noqa: BLE001 -- outside a twin host: show what the kernel has
        hd, ipsec = None, False
    want = args[0] if args else None
    out: list[str] = []
    if want in (None, "enc0"):
        if want == "enc0":
            print("\n".join(enc0(ipsec)))
            return 0
    for l in links:
        name = fbsd_name(l["ifname"])
        if want is None or want in (name, l["ifname"]):
            out += render(l, hd)
    if want is None:
        out += enc0(ipsec)
    elif not out:
        c.err("ifconfig", f"interface {want} does not exist")
        return 1
    print("\n".join(out))
    return 0


def _write_sysctl(path: str, value: str) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError:
        pass  # no IPv6 on this port: nothing to keep


def _tell_engine(ifname: str, up: bool) -> None:
    """The driver hears of the flag change (its if_ioctl SIOCSIFFLAGS): the engine's link op
    (fault sa_forgotten_on_link_down acts there). An engine not answering is said on stderr;
    the port's state changed all the same, as on FreeBSD."""
    try:
        from ipsec_hil_twin.engine.client import engine_request

        engine_request(c.host_dir().engine_sock, {"op": "link", "ifname": ifname, "up": up}, timeout=5.0)
    except Exception as exc:  # noqa: BLE001 -- the interface changed; the driver's view is best effort
        c.err("ifconfig", f"warning: the driver was not told {ifname} is {'up' if up else 'down'} ({exc})")


def configure(args: list[str]) -> int:
    ifname = "lo" if args[0] == "lo0" else args[0]
    rest = args[1:]
    if rest and rest[0] == "inet6" and len(rest) == 2 and rest[1] in ("-ifdisabled", "ifdisabled"):
        if not os.path.exists(f"/proc/sys/net/ipv6/conf/{ifname}"):
            c.err("ifconfig", f"interface {args[0]} does not exist")
            return 1
        try:
            nd6.set_ifdisabled(c.host_dir(), ifname, rest[1] == "ifdisabled")
        except OSError as exc:
            c.err("ifconfig", f"ioctl (SIOCSIFINFO_IN6): {exc.strerror}")
            return 1
        return 0
    if rest and rest[0] in ("up", "down"):
        if rest[0] == "down":
            # FreeBSD keeps an interface's addresses while it is down; Linux drops the IPv6
            # ones unless told not to (the port would come up without its outer address)
            _write_sysctl(f"/proc/sys/net/ipv6/conf/{ifname}/keep_addr_on_down", "1")
        r = subprocess.run([IP, "link", "set", ifname, rest[0]], capture_output=True, text=True)
        if r.returncode:
            c.err("ifconfig", f"interface {args[0]} does not exist")
            return 1
        _tell_engine(ifname, rest[0] == "up")
        return 0
    if rest and rest[0] == "mtu" and len(rest) == 2:
        r = subprocess.run([IP, "link", "set", ifname, "mtu", rest[1]], capture_output=True, text=True)
        if r.returncode:
            c.err("ifconfig", f"ioctl SIOCSIFMTU (set mtu): Invalid argument")
            return 1
        return 0
    c.err("ifconfig", f"only `IF inet6 [-]ifdisabled`, `up|down` and `mtu N` are emulated")
    return 1


if __name__ == "__main__":
    c.run_main(main)
