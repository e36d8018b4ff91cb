"""setkey(8) `-D` / `-DP` of FreeBSD 14 (libipsec pfkey_dump.c formats).

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

PROG = "setkey"

ENC_NAME = {"aes-gcm-16": "aes-gcm-16", "aes-cbc-hmac-sha256": "aes-cbc"}
AUTH_NAME = {"aes-cbc-hmac-sha256": "hmac-sha2-256"}
TS_RE = re.compile(r"^(?P<net>[^\[\]]+)(?:\[(?P<proto>[^/\]]+)?(?:/(?P<port>[^\]]+))?\])?$")
PROTO_NUM = {"tcp": 6, "udp": 17, "icmp": 1, "ipv6-icmp": 58, "icmp6": 58}


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
        text = dump_sas(sas, now, pid)
        sys.stdout.write(text if text else "No SAD entries.\n")
    return 0


def dump_sas(sas: list[dict], now: float, pid: int) -> str:
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
        out.append(f"\tseq=0x{seq:08x} replay={replay_bytes(sa)} flags=0x00000000 state=mature \n")
        out.append(f"\tcreated: {str_time(created)}\tcurrent: {str_time(now)}\n")
        out.append(f"\tdiff: {max(0, int(now - created))}(s)\thard: 0(s)\tsoft: 0(s)\n")
        out.append(f"\tlast: {str_time(last)}\thard: 0(s)\tsoft: 0(s)\n")
        out.append(f"\tcurrent: {int(sa.get('bytes', 0))}(bytes)\thard: 0(bytes)\tsoft: 0(bytes)\n")
        out.append(f"\tallocated: {int(sa.get('packets', 0))}\thard: 0\tsoft: 0\n")
        out.append(f"\tsadb_seq={n - 1 - idx} pid={pid} refcnt=1\n")
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
        out.append("\tlifetime: 0(s) validtime: 0(s)\n")
        out.append(f"\tspid={spid} seq={n - 1 - idx} pid={pid} scope=global \n")
        out.append("\trefcnt=1\n")
    return "".join(out)


if __name__ == "__main__":
    c.run_main(main)
