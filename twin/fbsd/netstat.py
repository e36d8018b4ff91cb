"""netstat(1) `-s -p esp|ipsec|ipsec6` of FreeBSD 14, text and `--libxo json`.

The counters are the engine's `esp` statistics (FreeBSD 14's JSON keys, typos included:
`esp-statictics`, `receieve-bytes`).  With ipsec.ko unloaded the sysctl is missing and
netstat prints nothing (JSON: an empty `statistics` object), exit 0.
"""
from __future__ import annotations

import json
import sys

from twin.fbsd import _common as c

PROG = "netstat"

ESP_LINES: list[tuple[str, str]] = [
    ("dropped-short-header", " packet{s} shorter than header shows"),
    ("dropped-bad-protocol", " packet{s} dropped; protocol family not supported"),
    ("dropped-no-tdb", " packet{s} dropped; no TDB"),
    ("dropped-bad-kcr", " packet{s} dropped; bad KCR"),
    ("dropped-queue-full", " packet{s} dropped; queue full"),
    ("dropped-no-transform", " packet{s} dropped; no transform"),
    ("dropped-bad-length", " packet{s} dropped; bad ilen"),
    ("replay-counter-wraps", " replay counter wrap{s}"),
    ("dropped-bad-crypto", " packet{s} dropped; bad encryption detected"),
    ("dropped-bad-auth", " packet{s} dropped; bad authentication detected"),
    ("possible-replay-detected", " possible replay packet{s} detected"),
    ("received-packets", " packet{s} in"),
    ("sent-packets", " packet{s} out"),
    ("dropped-bad-tdb", " packet{s} dropped; invalid TDB"),
    ("receieve-bytes", " byte{s} in"),
    ("sent-bytes", " byte{s} out"),
    ("dropped-too-large", " packet{s} dropped; larger than IP_MAXPACKET"),
    ("dropped-policy-violation", " packet{s} blocked due to policy"),
    ("crypto-failures", " crypto processing failure{s}"),
    ("tunnel-failures", " tunnel sanity check failure{s}"),
]

IPSEC_LINES: list[tuple[str, str]] = [
    ("dropped-policy-violation", " inbound packet{s} violated process security policy"),
    ("dropped-no-memory", " inbound packet{s} failed due to insufficient memory"),
    ("dropped-invalid", " invalid inbound packet{s}"),
    ("discarded-policy-violation", " outbound packet{s} violated process security policy"),
    ("discarded-no-sa", " outbound packet{s} with no SA available"),
    ("discarded-no-memory", " outbound packet{s} failed due to insufficient memory"),
    ("discarded-no-route", " outbound packet{s} with no route available"),
    ("discarded-invalid", " invalid outbound packet{s}"),
    ("send-bundled-sa", " outbound packet{s} with bundled SAs"),
    ("spdcache-hits", " spd cache hit{s}"),
    ("spdcache-misses", " spd cache miss{es}"),
    ("clusters-copied-during-clone", " cluster{s} copied during clone"),
    ("mbufs-inserted", " mbuf{s} inserted during makespace"),
]

HIST_ORDER = ["none", "null", "aes-cbc", "aes-ctr", "aes-gcm-16", "aes-gmac"]
"""SADB encryption algorithm names FreeBSD 14's netstat knows (histogram index order)."""

PROTOCOLS = {"esp": ("esp", "esp-statictics", ESP_LINES),
             "ipsec": ("ipsec", "ipsec-statistics", IPSEC_LINES),
             "ipsec6": ("ipsec6", "ipsec-statistics", IPSEC_LINES)}


def _plural(n: int, text: str) -> str:
    return text.replace("{s}", "" if n == 1 else "s").replace("{es}", "" if n == 1 else "es")


def usage() -> int:
    sys.stderr.write("usage: netstat [-46AaCcLnRSTWx] [-f protocol_family | -p protocol]\n"
                     "               [-M core] [-N system]\n"
                     "       netstat -s [-46sz] [-f protocol_family | -p protocol]\n")
    return 1


def parse_libxo(argv: list[str]) -> tuple[list[str], str | None]:
    """Strip `--libxo X` / `--libxo=X` from anywhere in argv (xo_parse_args does that)."""
    out: list[str] = []
    style: str | None = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--libxo" and i + 1 < len(argv):
            style = argv[i + 1]
            i += 2
            continue
        if a.startswith("--libxo=") or a.startswith("--libxo:"):
            style = a[len("--libxo="):]
            i += 1
            continue
        out.append(a)
        i += 1
    return out, style


def main(argv: list[str]) -> int:
    args, style = parse_libxo(argv)
    sflag = 0
    zflag = False
    proto: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-":
            return usage()
        j = 1
        while j < len(a):
            ch = a[j]
            if ch == "s":
                sflag += 1
            elif ch == "z":
                zflag = True
            elif ch == "p":
                rest = a[j + 1:]
                if rest:
                    proto = rest
                elif i + 1 < len(args):
                    i += 1
                    proto = args[i]
                else:
                    sys.stderr.write("netstat: option requires an argument -- p\n")
                    return usage()
                break
            elif ch in "46nW":
                pass
            else:
                sys.stderr.write(f"netstat: illegal option -- {ch}\n")
                return usage()
            j += 1
        i += 1
    if not sflag or proto is None:
        c.err(PROG, "only `-s -p esp|ipsec|ipsec6` is emulated on this appliance")
        return 1
    if proto not in PROTOCOLS:
        c.err(PROG, f"{proto}: unknown or uninstrumented protocol")
        return 1
    json_out = bool(style) and "json" in style.split(",")
    pretty = bool(style) and "pretty" in style.split(",")
    hd = c.host_dir()
    title, container, lines = PROTOCOLS[proto]
    stats: dict[str, int] | None = None
    hist: dict[str, int] = {}
    if c.module_loaded(c.load_state(hd), "ipsec"):
        if zflag:
            stats = {k: 0 for k, _ in lines}
        else:
            try:
                reply = c.engine(hd, {"op": "counters"})
            except c.EngineError as exc:
                c.err(PROG, str(exc))
                return 1
            src = reply.get("esp") if proto == "esp" else reply.get(proto)
            src = src or {}
            stats = {k: int(src.get(k, 0)) for k, _ in lines}
            if proto == "esp":
                hist = {str(k): int(v) for k, v in (reply.get("histogram") or {}).items() if int(v)}
    if json_out:
        sys.stdout.write(_json(container, lines, stats, hist, sflag, pretty))
    elif stats is not None:
        sys.stdout.write(_text(title, lines, stats, hist, sflag))
    return 0


def _hist_rows(hist: dict[str, int]) -> list[tuple[str, int]]:
    order = {n: i for i, n in enumerate(HIST_ORDER)}
    return sorted(hist.items(), key=lambda kv: order.get(kv[0], 100))


def _text(title: str, lines, stats: dict[str, int], hist: dict[str, int], sflag: int) -> str:
    out = [f"{title}:\n"]
    for key, text in lines:
        v = stats[key]
        if v or sflag <= 1:
            out.append(f"\t{v}{_plural(v, text)}\n")
    rows = _hist_rows(hist)
    if rows:
        out.append("\tESP output histogram:\n")
        for name, n in rows:
            out.append(f"\t\t{name}: {n}\n")
    return "".join(out)


def _json(container: str, lines, stats: dict[str, int] | None, hist: dict[str, int],
          sflag: int, pretty: bool) -> str:
    doc: dict = {"__version": "1", "statistics": {}}
    if stats is not None:
        body: dict = {}
        for key, _ in lines:
            v = stats[key]
            if v or sflag <= 1:
                body[key] = v
        rows = _hist_rows(hist)
        if rows:
            body["esp-output-histogram"] = [{"name": n, "count": v} for n, v in rows]
        doc["statistics"][container] = body
    if pretty:
        return json.dumps(doc, indent=2) + "\n"
    return json.dumps(doc) + "\n"


if __name__ == "__main__":
    c.run_main(main)
