"""setkey(8) `-D` / `-DP` of FreeBSD 14 and 15 (libipsec pfkey_dump.c formats).

Lifetimes are what strongSwan's kernel-pfkey installs (src/libcharon/plugins/kernel_pfkey/
kernel_pfkey_ipsec.c): per SA, SADB_EXT_LIFETIME_SOFT carries the child's rekey time (after
the jitter child_cfg.c get_lifetime subtracted; 0 on the outbound SA when the child has no
jitter, child_sa.c install) and SADB_EXT_LIFETIME_HARD its life time, both as addtime;
bytes and packets the child's rekey_bytes / life_bytes and packets limits (0: none), and
usetime 0 ("we only use addtime"). pfkey_sadump prints them on the `diff:` line (addtime),
the `last:` line (usetime) and the bytes / allocated lines. Per policy, add_policy sets a
hard lifetime of LONG_MAX on FreeBSD ("a lifetime has to be defined to be able to later
query the current use time"): `-DP` shows `lifetime: 9223372036854775807(s)` (amd64).

On a kernel with option IPSEC_OFFLOAD (FreeBSD 15: ipsec_hil_twin.fbsd.osrel) the kernel adds,
per SA an interface took (ipsec_offload.c ipsec_accel_is_accel_sav: the SA has a handle
on an interface, even one the driver refused), the SW and HW offload lifetimes, and the
interfaces that accepted it (ipsec_accel_key_setaccelif: handled, not refused); pfkey_sadump
prints `\thw offl if: IF[,IF]` after the state line and `\tsw offl use: ...` /
`\thw offl use: ...` after sadb_seq. Here: an SA the engine offloads is handled by the
driver on its outer port (both lines, counts from the SA's record: the engine is both the
stack that tags a packet and the driver that counts it); any other SA while the driver
is loaded -- declined, or a `cipher: kernel` end: the kernel offers every mature SA to
every capable interface (ipsec_accel_sa_newkey_act), strongSwan names none -- was refused
(counts zero, no `hw offl if:`); without the driver no interface offers IPSEC_OFFLOAD and
no line shows.

Every SA comes from the engine's `list_sas`, keys included: FreeBSD shows them to root,
and the suite uses them for independent decryption (it must never log them).  AES-CBC
is SADB_X_EALG_AESCBC, which FreeBSD 14's table names `aes-cbc` (lib/libipsec/
pfkey_dump.c str_alg_enc; `rijndael-cbc` was the KAME name).  `replay=` is the
window's bitmap size in bytes (see `replay_bytes`).  Keys are
dumped by ipsec_hexdump: groups of 4 bytes each preceded by a space, a newline every
32 bytes (so a 36-byte GCM key + salt wraps onto a second line).
"""
from __future__ import annotations

import ipaddress
import os
import re
import sys
import time

from ipsec_hil_twin.fbsd import _common as c
from ipsec_hil_twin.fbsd import osrel

PROG = "setkey"

ENC_NAME = {"aes-gcm-16": "aes-gcm-16", "aes-cbc-hmac-sha256": "aes-cbc"}
AUTH_NAME = {"aes-cbc-hmac-sha256": "hmac-sha2-256"}
TS_RE = re.compile(r"^(?P<net>[^\[\]]+)(?:\[(?P<proto>[^/\]]+)?(?:/(?P<port>[^\]]+))?\])?$")
PROTO_NUM = {"tcp": 6, "udp": 17, "icmp": 1, "ipv6-icmp": 58, "icmp6": 58}
LONG_MAX = (1 << 63) - 1
"""strongSwan's policy hard lifetime on FreeBSD (kernel_pfkey_ipsec.c add_policy), amd64's long."""
U64 = 1 << 64


def hexdump(hexkey: str) -> str:
    data = bytes.fromhex(hexkey)
    out = []
    for i, b in enumerate(data):
        if i != 0 and i % 32 == 0:
            out.append("\n")
        if i % 4 == 0:
            out.append(" ")
        out.append(f"{b:02x}")
    return "".join(out)


def replay_bytes(sa: dict) -> int:
    """What `replay=` shows for one association: the replay bitmap's size in bytes.

    strongSwan's kernel-pfkey (src/libcharon/plugins/kernel_pfkey/kernel_pfkey_ipsec.c
    add_sa) sets the window on the inbound association only ("not relevant for the
    outbound SA"), as `min((replay_window + 7) / 8, UINT8_MAX)` bytes on the BSDs (plus
    SADB_X_EXT_SA_REPLAY in packets, which the kernel rounds the same way); FreeBSD's
    pfkey_dump.c pfkey_sadump prints `sadb_x_sa_replay_replay >> 3` or `sadb_sa_replay`,
    bytes either way.  So the default 32-packet window shows `replay=4` inbound and
    `replay=0` outbound.
    """
    if sa.get("direction") != "in":
        return 0
    return min((int(sa.get("replay_window", 32)) + 7) // 8, 255)


def str_time(t: float | int | None) -> str:
    if not t:
        return " " * 20
    return time.ctime(int(t))[4:24]


def usage() -> int:
    sys.stderr.write("usage: setkey [-v] -c\n       setkey [-v] -f filename\n"
                     "       setkey [-v] -e \"<script>\"\n       setkey [-Pv] -D\n"
                     "       setkey [-Pv] -F\n       setkey [-H] -x\n       setkey [-V] [-h]\n")
    return 1


def main(argv: list[str]) -> int:
    flags = set()
    for a in argv:
        if not a.startswith("-") or a == "-":
            return usage()
        for ch in a[1:]:
            if ch not in "DPvan":
                sys.stderr.write(f"setkey: illegal option -- {ch}\n")
                return usage()
            flags.add(ch)
    if "D" not in flags:
        c.err(PROG, "only -D and -DP are emulated on this appliance")
        return 1
    hd = c.host_dir()
    try:
        sas = c.engine(hd, {"op": "list_sas"}).get("sas") or []
    except c.EngineError as exc:
        c.err(PROG, str(exc))
        return 1
    now = time.time()
    pid = os.getpid()
    if "P" in flags:
        if "spd_policy_missing" in c.active_faults(hd):  # the first association's out policy was never installed
            first_out = next((i for i, sa in enumerate(sas) if sa.get("direction", "out") == "out"), None)
            sas = [sa for i, sa in enumerate(sas) if i != first_out]
        text = dump_policies(sas, now, pid)
        sys.stdout.write(text if text else "No SPD entries.\n")
    else:
        offload = None
        if osrel.of_host(c.host_info(hd)).ipsec_offload:
            offload = offload_view(hd)
        text = dump_sas(sas, now, pid, offload)
        sys.stdout.write(text if text else "No SAD entries.\n")
    return 0


def offload_view(hd) -> dict | None:
    """What an IPSEC_OFFLOAD kernel knows for this appliance: None when no interface offers
    the capability (the driver is not loaded), else {"ports": {address: ifname}} -- the
    interface holding each local address, the one an offloaded SA is installed on."""
    if not c.driver_loaded(hd):
        return None
    ports = {}
    for port in c.host_info(hd).get("ports") or []:
        for a in port.get("addresses") or []:
            ports[str(a).split("/", 1)[0]] = str(port.get("ifname") or port.get("name"))
    return {"ports": ports}


def _lifetime(sa: dict, key: str) -> int:
    """A lifetime value as the kernel keeps it (u_int64, what %lu prints of it)."""
    return int(sa.get(key) or 0) % U64


def _offload_lines(sa: dict, offload: dict | None) -> tuple[str, str]:
    """(the `hw offl if:` line, the sw/hw offl lines after sadb_seq) of one SA; empty
    strings where the kernel sends no such extension."""
    if offload is None:
        return "", ""
    local = sa["src"] if sa.get("direction") == "out" else sa["dst"]
    if sa.get("offloaded"):
        packets, nbytes = int(sa.get("packets", 0)), int(sa.get("bytes", 0))
        # accel_firstused: the engine keeps no first use, so the SA's last use stands in
        use = str_time(sa.get("last_use") or 0)
        ifname = offload["ports"].get(local, "")
        if_line = f"\thw offl if: {ifname}\n" if ifname else ""
    else:  # refused by the driver: a handle without HANDLED, zero counts
        packets = nbytes = 0
        use = str_time(0)
        if_line = ""
    tail = (f"\tsw offl use: {use}\tsw offl allocated: {packets}\tsw offl: {nbytes}(bytes)\n"
            f"\thw offl use: {use}\thw offl allocated: {packets}\thw offl: {nbytes}(bytes)\n")
    return if_line, tail


def dump_sas(sas: list[dict], now: float, pid: int, offload: dict | None = None) -> str:
    """pfkey_sadump for every SA; OFFLOAD (offload_view) on an IPSEC_OFFLOAD kernel."""
    out = []
    n = len(sas)
    for idx, sa in enumerate(sas):
        spi = int(sa["spi"])
        reqid = int(sa.get("reqid", 0))
        cipher = str(sa.get("cipher", ""))
        created = sa.get("created") or sa.get("install_time") or now
        last = sa.get("last_use") or 0
        out.append(f"{sa['src']} {sa['dst']}\n")
        out.append(f"\tesp mode=tunnel spi={spi}(0x{spi:08x}) reqid={reqid}(0x{reqid:08x})\n")
        if sa.get("enc_key"):
            out.append(f"\tE: {ENC_NAME.get(cipher, cipher)} {hexdump(sa['enc_key'])}\n")
        if sa.get("auth_key"):
            out.append(f"\tA: {AUTH_NAME.get(cipher, 'none')} {hexdump(sa['auth_key'])}\n")
        # sadb_x_sa2_sequence is a u_int32_t (pfkey_dump.c prints it %08x): an ESN
        # association past 2^32 shows its low half only
        seq = int(sa.get("seq", 0)) & 0xFFFFFFFF
        if_line, offl_lines = _offload_lines(sa, offload)
        out.append(f"\tseq=0x{seq:08x} replay={replay_bytes(sa)} flags=0x00000000 state=mature \n")
        out.append(if_line)
        out.append(f"\tcreated: {str_time(created)}\tcurrent: {str_time(now)}\n")
        out.append(f"\tdiff: {max(0, int(now) - int(created))}(s)\thard: {_lifetime(sa, 'life_time')}(s)"
                   f"\tsoft: {_lifetime(sa, 'soft_time')}(s)\n")
        out.append(f"\tlast: {str_time(last)}\thard: 0(s)\tsoft: 0(s)\n")  # usetime: strongSwan sets 0
        out.append(f"\tcurrent: {int(sa.get('bytes', 0))}(bytes)\thard: {_lifetime(sa, 'life_bytes')}(bytes)"
                   f"\tsoft: {_lifetime(sa, 'soft_bytes')}(bytes)\n")
        out.append(f"\tallocated: {int(sa.get('packets', 0))}\thard: {_lifetime(sa, 'life_packets')}"
                   f"\tsoft: {_lifetime(sa, 'soft_packets')}\n")
        out.append(f"\tsadb_seq={n - 1 - idx} pid={pid} refcnt=1\n")
        out.append(offl_lines)
    return "".join(out)


def _selector(ts: str) -> tuple[str, str, int | None]:
    """`10.0.0.0/8[tcp/5201]` -> ("10.0.0.0/8[5201]", "tcp", 6)."""
    m = TS_RE.match(ts.strip())
    if not m:
        raise ValueError(f"traffic selector {ts!r}")
    net = ipaddress.ip_network(m.group("net"), strict=False)
    full = net.max_prefixlen
    pref = "" if net.prefixlen == full else f"/{net.prefixlen}"
    proto = m.group("proto")
    port = m.group("port")
    pnum = PROTO_NUM.get(proto) if proto else None
    if pnum == 58:
        portstr = ""
    elif port and port.isdigit():
        portstr = f"[{port}]"
    else:
        portstr = "[any]"
    return f"{net.network_address}{pref}{portstr}", (proto or "any"), pnum


def dump_policies(sas: list[dict], now: float, pid: int) -> str:
    out = []
    spid = 0
    entries = []
    for sa in sas:
        local = sa.get("local_ts") or []
        remote = sa.get("remote_ts") or []
        direction = sa.get("direction", "out")
        for lt in local:
            for rt in remote:
                # child_sa.c install_policies: only pairs of one family make a policy
                if (":" in lt.split("[", 1)[0]) == (":" in rt.split("[", 1)[0]):
                    entries.append((sa, lt, rt, direction))
    n = len(entries)
    for idx, (sa, lt, rt, direction) in enumerate(entries):
        src_ts, dst_ts = (lt, rt) if direction == "out" else (rt, lt)
        try:
            s_sel, proto, pnum = _selector(src_ts)
            d_sel, _, _ = _selector(dst_ts)
        except ValueError:
            continue
        if pnum == 58:
            upper = "icmp6"
        else:
            upper = proto if proto != "any" else "any"
        spid += 1
        created = sa.get("created") or sa.get("install_time") or now
        out.append(f"{s_sel} {d_sel} {upper}\n")
        out.append(f"\t{direction} ipsec\n")
        out.append(f"\tesp/tunnel/{sa['src']}-{sa['dst']}/unique:{int(sa.get('reqid', 0))}\n")
        out.append(f"\tcreated: {str_time(created)}  lastused: {str_time(sa.get('last_use') or 0)}\n")
        out.append(f"\tlifetime: {LONG_MAX}(s) validtime: 0(s)\n")
        out.append(f"\tspid={spid} seq={n - 1 - idx} pid={pid} scope=global \n")
        out.append("\trefcnt=1\n")
    return "".join(out)


if __name__ == "__main__":
    c.run_main(main)
