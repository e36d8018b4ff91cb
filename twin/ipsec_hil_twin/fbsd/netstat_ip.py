"""`netstat -s -p ip` / `-p ip6` of FreeBSD 14 (usr.bin/netstat/inet.c ip_stats,
inet6.c ip6_stats), text and `--libxo json`.

Where the numbers come from: the appliance's IP stack is its network namespace's, so its
`struct ipstat` / `struct ip6stat` are that stack's own counters (/proc/net/snmp and
/proc/net/netstat's IpExt, /proc/net/snmp6, read inside the namespace where the command
runs), each mapped to the FreeBSD counter of the same meaning (IP_COUNTERS / IP6_COUNTERS:
ips_total = InReceives, ips_delivered = InDelivers, ips_forward = ForwDatagrams, ...). A
FreeBSD counter Linux does not keep reads 0 (ips_badoptions, ips_nogif, ...): named in
the tables, not invented. ip6_stats' per-next-header input histogram and its per-interface
mbuf list are absent (no such Linux counters; FreeBSD prints them only when non-zero).

Formats: each line is `xo_emit("\\t{:KEY/%ju} {N:/TEXT}\\n")` with `%s` the plural, printed
when the value is non-zero or sflag <= 1 (`p`), or without a plural (`p1a`); ips_forward
and ips_fastforward share one text line. JSON: `{"__version": "1", "statistics": {"ip":
{...}}}` as the twin's `-p esp` (netstat's xo_set_version), ip6 with its
`mbuf-statistics` and `source-address-selection` containers.
"""
from __future__ import annotations

import json

# (FreeBSD libxo key, text after the number (%s: the plural, "s" or none), Linux source)
# Linux sources: "Ip.X" /proc/net/snmp, "IpExt.X" /proc/net/netstat, "Icmp.X" /proc/net/snmp,
# "X" /proc/net/snmp6; None: FreeBSD keeps it, Linux does not (0).
IP_COUNTERS: tuple[tuple[str, str, str | None], ...] = (
    ("received-packets", "total packet%s received", "Ip.InReceives"),
    ("dropped-bad-checksum", "bad header checksum%s", "IpExt.InCsumErrors"),
    ("dropped-below-minimum-size", "with size smaller than minimum", None),
    ("dropped-short-packets", "with data size < data length", "IpExt.InTruncatedPkts"),
    ("dropped-too-long", "with ip length > max ip packet size", None),
    ("dropped-short-header-length", "with header length < data size", "Ip.InHdrErrors"),
    ("dropped-short-data", "with data length < header length", None),
    ("dropped-bad-options", "with bad options", None),
    ("dropped-bad-version", "with incorrect version number", None),
    ("received-fragments", "fragment%s received", "Ip.ReasmReqds"),
    ("dropped-fragments", "fragment%s dropped (dup or out of space)", "Ip.ReasmFails"),
    ("dropped-fragments-after-timeout", "fragment%s dropped after timeout", "Ip.ReasmTimeout"),
    ("reassembled-packets", "packet%s reassembled ok", "Ip.ReasmOKs"),
    ("received-local-packets", "packet%s for this host", "Ip.InDelivers"),
    ("dropped-unknown-protocol", "packet%s for unknown/unsupported protocol", "Ip.InUnknownProtos"),
    ("forwarded-packets", "packet%s forwarded", "Ip.ForwDatagrams"),
    ("fast-forwarded-packets", "packet%s fast forwarded", None),
    ("packets-cannot-forward", "packet%s not forwardable", "Ip.InAddrErrors"),
    ("received-unknown-multicast-group", "packet%s received for unknown multicast group", None),
    ("redirects-sent", "redirect%s sent", "Icmp.OutRedirects"),
    ("sent-packets", "packet%s sent from this host", "Ip.OutRequests"),
    ("send-packets-fabricated-header", "packet%s sent with fabricated ip header", None),
    ("discard-no-mbufs", "output packet%s dropped due to no bufs, etc.", "Ip.OutDiscards"),
    ("discard-no-route", "output packet%s discarded due to no route", "Ip.OutNoRoutes"),
    ("sent-fragments", "output datagram%s fragmented", "Ip.FragOKs"),
    ("fragments-created", "fragment%s created", "Ip.FragCreates"),
    ("discard-cannot-fragment", "datagram%s that can't be fragmented", "Ip.FragFails"),
    ("discard-tunnel-no-gif", "tunneling packet%s that can't find gif", None),
    ("discard-bad-address", "datagram%s with bad address in header", None),
)

IP6_COUNTERS: tuple[tuple[str, str, str | None], ...] = (
    ("received-packets", "total packet%s received", "Ip6InReceives"),
    ("dropped-below-minimum-size", "with size smaller than minimum", None),
    ("dropped-short-packets", "with data size < data length", "Ip6InTruncatedPkts"),
    ("dropped-bad-options", "with bad options", "Ip6InHdrErrors"),
    ("dropped-bad-version", "with incorrect version number", None),
    ("received-fragments", "fragment%s received", "Ip6ReasmReqds"),
    ("dropped-fragment", "fragment%s dropped (dup or out of space)", "Ip6ReasmFails"),
    ("dropped-fragment-after-timeout", "fragment%s dropped after timeout", "Ip6ReasmTimeout"),
    ("dropped-fragments-overflow", "fragment%s that exceeded limit", None),
    ("reassembled-packets", "packet%s reassembled ok", "Ip6ReasmOKs"),
    ("received-local-packets", "packet%s for this host", "Ip6InDelivers"),
    ("forwarded-packets", "packet%s forwarded", "Ip6OutForwDatagrams"),
    ("packets-not-forwardable", "packet%s not forwardable", "Ip6InAddrErrors"),
    ("sent-redirects", "redirect%s sent", "Icmp6OutRedirects"),
    ("sent-packets", "packet%s sent from this host", "Ip6OutRequests"),
    ("send-packets-fabricated-header", "packet%s sent with fabricated ip header", None),
    ("discard-no-mbufs", "output packet%s dropped due to no bufs, etc.", "Ip6OutDiscards"),
    ("discard-no-route", "output packet%s discarded due to no route", "Ip6OutNoRoutes"),
    ("sent-fragments", "output datagram%s fragmented", "Ip6FragOKs"),
    ("fragments-created", "fragment%s created", "Ip6FragCreates"),
    ("discard-cannot-fragment", "datagram%s that can't be fragmented", "Ip6FragFails"),
    ("discard-scope-violations", "packet%s that violated scope rules", None),
    ("multicast-no-join-packets", "multicast packet%s which we don't join", None),
)
#: ip6_stats' counters printed after the mbuf-statistics container, then the one inside
#: source-address-selection
IP6_AFTER_MBUF: tuple[tuple[str, str, str | None], ...] = (
    ("dropped-header-too-long", "packet%s whose headers are not contiguous", None),
    ("discard-tunnel-no-gif", "tunneling packet%s that can't find gif", None),
    ("dropped-too-many-headers", "packet%s discarded because of too many headers", None),
)
IP6_SOURCE_FAILURES = ("address-selection-failures", "failure%s of source address selection", None)


def linux_counters(proc: str = "/proc/net") -> dict[str, int]:
    """The namespace's IP counters: `Ip.X`, `IpExt.X`, `Icmp.X` and snmp6's `X` -> value."""
    out: dict[str, int] = {}
    for name in ("snmp", "netstat"):
        try:
            with open(f"{proc}/{name}", encoding="ascii") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for head, vals in zip(lines[::2], lines[1::2]):
            keys, nums = head.split(), vals.split()
            if not keys or keys[0] != nums[0]:
                continue
            group = keys[0].rstrip(":")
            for k, v in zip(keys[1:], nums[1:]):
                if v.lstrip("-").isdigit():
                    out[f"{group}.{k}"] = int(v)
    try:
        with open(f"{proc}/snmp6", encoding="ascii") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    out[parts[0]] = int(parts[1])
    except OSError:
        pass
    return out


def values(table, linux: dict[str, int], zero: bool = False) -> dict[str, int]:
    """FreeBSD key -> value for one table (0 where Linux keeps no such counter, or -z)."""
    return {key: 0 if zero or src is None else max(0, int(linux.get(src, 0))) for key, _, src in table}


def _line(n: int, text: str) -> str:
    """inet.c's `p` (a text with %s: its plural) and `p1a` (a text without)."""
    return f"{n} " + (text % ("" if n == 1 else "s") if "%s" in text else text)


def _shown(table, stats: dict[str, int], sflag: int) -> dict[str, str]:
    """Key -> text of the rows of ``table`` netstat prints: the non-zero ones, every one
    unless -s was given twice (sflag > 1)."""
    return {key: text for key, text, _ in table if stats[key] or sflag <= 1}


def text_ip(stats: dict[str, int], sflag: int) -> str:
    """inet.c ip_stats as text: forwarded and fast-forwarded share a line."""
    out = ["ip:\n"]
    for key, text in _shown(IP_COUNTERS, stats, sflag).items():
        line = _line(stats[key], text)
        if key == "forwarded-packets":
            out.append(f"\t{line}")
        elif key == "fast-forwarded-packets":
            out.append(f" ({line})")
        else:
            out.append(f"\t{line}\n")
        if key == "fast-forwarded-packets" and (stats["forwarded-packets"] or sflag <= 1):
            out.append("\n")
    return "".join(out)


def text_ip6(stats: dict[str, int], sflag: int) -> str:
    """inet6.c ip6_stats as text (no histograms: see the module docstring)."""
    before = _shown(IP6_COUNTERS, stats, sflag)
    after = _shown((*IP6_AFTER_MBUF, IP6_SOURCE_FAILURES), stats, sflag)
    return "".join(["ip6:\n", *(f"\t{_line(stats[k], t)}\n" for k, t in before.items()),
                    "\tMbuf statistics:\n", "\t\t0 one mbuf\n", "\t\t0 one ext mbuf\n", "\t\t0 two or more ext mbuf\n",
                    *(f"\t{_line(stats[k], t)}\n" for k, t in after.items())])


def json_doc(proto: str, stats: dict[str, int], sflag: int, pretty: bool) -> str:
    """The libxo JSON of ip_stats / ip6_stats under netstat's `statistics` container."""
    body: dict = {k: stats[k] for k in _shown(IP_COUNTERS if proto == "ip" else IP6_COUNTERS, stats, sflag)}
    if proto != "ip":
        body["mbuf-statistics"] = {"one-mbuf": 0, "one-extra-mbuf": 0, "two-or-more-extra-mbufs": 0}
        body.update({k: stats[k] for k in _shown(IP6_AFTER_MBUF, stats, sflag)})
        body["source-address-selection"] = {k: stats[k] for k in _shown((IP6_SOURCE_FAILURES,), stats, sflag)}
    doc = {"__version": "1", "statistics": {proto: body}}
    return (json.dumps(doc, indent=2) if pretty else json.dumps(doc)) + "\n"


def stats_of(proto: str, zero: bool = False) -> dict[str, int]:
    """Every FreeBSD counter of ``proto`` (ip | ip6) now."""
    linux = {} if zero else linux_counters()
    if proto == "ip":
        return values(IP_COUNTERS, linux, zero)
    return {**values(IP6_COUNTERS, linux, zero), **values(IP6_AFTER_MBUF, linux, zero),
            **values((IP6_SOURCE_FAILURES,), linux, zero)}
