"""netstat(1) `-s -p esp|ipsec|ipsec6|ip|ip6`, `-m` and `-r` of FreeBSD 14, text and `--libxo json`.

`-p ip` / `-p ip6`: ipsec_hil_twin.fbsd.netstat_ip (the namespace's own IP counters).
`-r [-46nW] [-f family] [-F fib]`: ipsec_hil_twin.fbsd.netstat_route (the namespace's routes).
`-i | -I IF [-46bdnW] [-f family]`: ipsec_hil_twin.fbsd.netstat_if (the ports' counters, drops included).

The counters are the engine's `esp` statistics (FreeBSD 14's JSON keys, typos included:
`esp-statictics`, `receieve-bytes`).  With ipsec.ko unloaded the sysctl is missing and
netstat prints nothing (JSON: an empty `statistics` object), exit 0.
"""
from __future__ import annotations

import json
import sys

from ipsec_hil_twin.fbsd import _common as c

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


USAGE = """\
usage: netstat [-46AaCcLnRSTWx] [-f protocol_family | -p protocol]
               [-M core] [-N system]
       netstat -i | -I interface [-46abdhnW] [-f address_family]
               [-M core] [-N system]
       netstat -w wait [-I interface] [-46d] [-M core] [-N system]
               [-q howmany]
       netstat -s [-46sz] [-f protocol_family | -p protocol]
               [-M core] [-N system]
       netstat -i | -I interface -s [-46s]
               [-f protocol_family | -p protocol] [-M core] [-N system]
       netstat -m [-M core] [-N system]
       netstat -B [-z] [-I interface]
       netstat -r [-46AnW] [-F fibnum] [-f address_family]
               [-M core] [-N system]
       netstat -rs [-s] [-M core] [-N system]
       netstat -g [-46W] [-f address_family] [-M core] [-N system]
       netstat -gs [-46s] [-f address_family] [-M core] [-N system]
       netstat -Q
"""
"""main.c usage(), whole: what FreeBSD prints after any option it does not know."""


def usage() -> int:
    sys.stderr.write(USAGE)
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
    mflag = zflag = False
    proto: str | None = None
    given: list[tuple[str, str | None]] = []  # options -r reads, in the order typed (netstat_route)
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
            elif ch == "m":
                mflag = True
            elif ch in "pfFI":
                rest = a[j + 1:]
                if rest:
                    value = rest
                elif i + 1 < len(args):
                    i += 1
                    value = args[i]
                else:
                    sys.stderr.write(f"netstat: option requires an argument -- {ch}\n")
                    return usage()
                if ch == "p":
                    proto = value
                given.append((ch, value))
                break
            elif ch in "46AnWlrbdi":
                given.append((ch, None))
            else:
                sys.stderr.write(f"netstat: illegal option -- {ch}\n")
                return usage()
            j += 1
        i += 1
    if mflag and not sflag:
        return _mbufs(style)
    if ("i", None) in given or any(ch == "I" for ch, _v in given):
        from ipsec_hil_twin.fbsd import netstat_if  # here: the -s path stays as cheap as before

        return netstat_if.intpr(given, style)
    if ("r", None) in given:
        from ipsec_hil_twin.fbsd import netstat_route  # here: the -s path stays as cheap as before

        return netstat_route.routepr(given, sflag, style)
    if not sflag or proto is None:
        c.err(PROG, "only `-s -p esp|ipsec|ipsec6|ip|ip6`, `-m` and `-r` are emulated on this appliance")
        return 1
    if proto in ("ip", "ip6"):
        from ipsec_hil_twin.fbsd import netstat_ip  # here: the esp path stays as cheap as before

        ip_stats = netstat_ip.stats_of(proto, zflag)
        style_set = set((style or "").split(","))
        if "json" in style_set:
            sys.stdout.write(netstat_ip.json_doc(proto, ip_stats, sflag, "pretty" in style_set))
        else:
            sys.stdout.write((netstat_ip.text_ip if proto == "ip" else netstat_ip.text_ip6)(ip_stats, sflag))
        return 0
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


MBUF_LINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("{}/{}/{} mbufs in use (current/cache/total)", ("mbuf-current", "mbuf-cache", "mbuf-total")),
    ("{}/{}/{}/{} mbuf clusters in use (current/cache/total/max)",
     ("cluster-current", "cluster-cache", "cluster-total", "cluster-max")),
    ("{}/{} mbuf+clusters out of packet secondary zone in use (current/cache)", ("packet-count", "packet-free")),
    ("{}/{}/{}/{} {}k (page size) jumbo clusters in use (current/cache/total/max)",
     ("jumbo-count", "jumbo-cache", "jumbo-total", "jumbo-max", "jumbo-page-size")),
    ("{}/{}/{}/{} 9k jumbo clusters in use (current/cache/total/max)",
     ("jumbo9-count", "jumbo9-cache", "jumbo9-total", "jumbo9-max")),
    ("{}/{}/{}/{} 16k jumbo clusters in use (current/cache/total/max)",
     ("jumbo16-count", "jumbo16-cache", "jumbo16-total", "jumbo16-limit")),
    ("{}K/{}K/{}K bytes allocated to network (current/cache/total)", ("bytes-in-use", "bytes-in-cache", "bytes-total")),
    ("{}/{}/{} requests for mbufs denied (mbufs/clusters/mbuf+clusters)",
     ("mbuf-failures", "cluster-failures", "packet-failures")),
    ("{}/{}/{} requests for mbufs delayed (mbufs/clusters/mbuf+clusters)",
     ("mbuf-sleeps", "cluster-sleeps", "packet-sleeps")),
    ("{}/{}/{} requests for jumbo clusters delayed ({}k/9k/16k)",
     ("jumbop-sleeps", "jumbo9-sleeps", "jumbo16-sleeps", "jumbo-page-size")),
    ("{}/{}/{} requests for jumbo clusters denied ({}k/9k/16k)",
     ("jumbop-failures", "jumbo9-failures", "jumbo16-failures", "jumbo-page-size")),
    ("{} sendfile syscalls", ("sendfile-syscalls",)),
    ("{} sendfile syscalls completed without I/O request", ("sendfile-no-io",)),
    ("{} requests for I/O initiated by sendfile", ("sendfile-io-count",)),
    ("{} pages read by sendfile as part of a request", ("sendfile-pages-sent",)),
    ("{} pages were valid at time of a sendfile request", ("sendfile-pages-valid",)),
    ("{} pages were valid and substituted to bogus page", ("sendfile-pages-bogus",)),
    ("{} pages were requested for read ahead by applications", ("sendfile-requested-readahead",)),
    ("{} pages were read ahead by sendfile", ("sendfile-readahead",)),
    ("{} times sendfile encountered an already busy page", ("sendfile-busy-encounters",)),
    ("{} requests for sfbufs denied", ("sfbufs-alloc-failed",)),
    ("{} requests for sfbufs delayed", ("sfbufs-alloc-wait",)),
)
"""usr.bin/netstat/mbuf.c:mbpr() of FreeBSD 14 on amd64 (no sfbufs line: no kern.ipc.nsfbufs)."""


def _mbufs(style: str | None) -> int:
    """`netstat -m`: the JSON has no __version and no "statistics" wrapper (mbpr opens
    only "mbuf-statistics"); the page-size repeats in the jumbo request labels are text only."""
    from ipsec_hil_twin.fbsd import _kmem  # here: the -s path stays as cheap as before

    stats = _kmem.mbuf_statistics(_kmem.kernel_memory(c.host_dir()))
    styles = (style or "").split(",")
    if "json" in styles:
        doc = {"mbuf-statistics": stats}
        sys.stdout.write((json.dumps(doc, indent=2) if "pretty" in styles else json.dumps(doc)) + "\n")
    else:
        sys.stdout.write("".join(fmt.format(*(stats[k] for k in keys)) + "\n" for fmt, keys in MBUF_LINES))
    return 0


if __name__ == "__main__":
    c.run_main(main)
