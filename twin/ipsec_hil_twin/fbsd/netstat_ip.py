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

# (FreeBSD libxo key, text after the number (%s = plural or none), plural?, Linux source)
# Linux sources: "Ip.X" /proc/net/snmp, "IpExt.X" /proc/net/netstat, "Icmp.X" /proc/net/snmp,
# "X" /proc/net/snmp6; None: FreeBSD keeps it, Linux does not (0).
IP_COUNTERS: tuple[tuple[str, str, bool, str | None], ...] = (
    ("received-packets", "total packet%s received", True, "Ip.InReceives"),
    ("dropped-bad-checksum", "bad header checksum%s", True, "IpExt.InCsumErrors"),
    ("dropped-below-minimum-size", "with size smaller than minimum", False, None),
    ("dropped-short-packets", "with data size < data length", False, "IpExt.InTruncatedPkts"),
    ("dropped-too-long", "with ip length > max ip packet size", False, None),
    ("dropped-short-header-length", "with header length < data size", False, "Ip.InHdrErrors"),
    ("dropped-short-data", "with data length < header length", False, None),
    ("dropped-bad-options", "with bad options", False, None),
    ("dropped-bad-version", "with incorrect version number", False, None),
    ("received-fragments", "fragment%s received", True, "Ip.ReasmReqds"),
    ("dropped-fragments", "fragment%s dropped (dup or out of space)", True, "Ip.ReasmFails"),
    ("dropped-fragments-after-timeout", "fragment%s dropped after timeout", True, "Ip.ReasmTimeout"),
    ("reassembled-packets", "packet%s reassembled ok", True, "Ip.ReasmOKs"),
    ("received-local-packets", "packet%s for this host", True, "Ip.InDelivers"),
    ("dropped-unknown-protocol", "packet%s for unknown/unsupported protocol", True, "Ip.InUnknownProtos"),
    ("forwarded-packets", "packet%s forwarded", True, "Ip.ForwDatagrams"),
    ("fast-forwarded-packets", "packet%s fast forwarded", True, None),
    ("packets-cannot-forward", "packet%s not forwardable", True, "Ip.InAddrErrors"),
    ("received-unknown-multicast-group", "packet%s received for unknown multicast group", True, None),
    ("redirects-sent", "redirect%s sent", True, "Icmp.OutRedirects"),
    ("sent-packets", "packet%s sent from this host", True, "Ip.OutRequests"),
    ("send-packets-fabricated-header", "packet%s sent with fabricated ip header", True, None),
    ("discard-no-mbufs", "output packet%s dropped due to no bufs, etc.", True, "Ip.OutDiscards"),
    ("discard-no-route", "output packet%s discarded due to no route", True, "Ip.OutNoRoutes"),
    ("sent-fragments", "output datagram%s fragmented", True, "Ip.FragOKs"),
    ("fragments-created", "fragment%s created", True, "Ip.FragCreates"),
    ("discard-cannot-fragment", "datagram%s that can't be fragmented", True, "Ip.FragFails"),
    ("discard-tunnel-no-gif", "tunneling packet%s that can't find gif", True, None),
    ("discard-bad-address", "datagram%s with bad address in header", True, None),
)

IP6_COUNTERS: tuple[tuple[str, str, bool, str | None], ...] = (
    ("received-packets", "total packet%s received", True, "Ip6InReceives"),
    ("dropped-below-minimum-size", "with size smaller than minimum", False, None),
    ("dropped-short-packets", "with data size < data length", False, "Ip6InTruncatedPkts"),
    ("dropped-bad-options", "with bad options", False, "Ip6InHdrErrors"),
    ("dropped-bad-version", "with incorrect version number", False, None),
    ("received-fragments", "fragment%s received", True, "Ip6ReasmReqds"),
    ("dropped-fragment", "fragment%s dropped (dup or out of space)", True, "Ip6ReasmFails"),
    ("dropped-fragment-after-timeout", "fragment%s dropped after timeout", True, "Ip6ReasmTimeout"),
    ("dropped-fragments-overflow", "fragment%s that exceeded limit", True, None),
    ("reassembled-packets", "packet%s reassembled ok", True, "Ip6ReasmOKs"),
    ("received-local-packets", "packet%s for this host", True, "Ip6InDelivers"),
    ("forwarded-packets", "packet%s forwarded", True, "Ip6OutForwDatagrams"),
    ("packets-not-forwardable", "packet%s not forwardable", True, "Ip6InAddrErrors"),
    ("sent-redirects", "redirect%s sent", True, "Icmp6OutRedirects"),
    ("sent-packets", "packet%s sent from this host", True, "Ip6OutRequests"),
    ("send-packets-fabricated-header", "packet%s sent with fabricated ip header", True, None),
    ("discard-no-mbufs", "output packet%s dropped due to no bufs, etc.", True, "Ip6OutDiscards"),
    ("discard-no-route", "output packet%s discarded due to no route", True, "Ip6OutNoRoutes"),
    ("sent-fragments", "output datagram%s fragmented", True, "Ip6FragOKs"),
    ("fragments-created", "fragment%s created", True, "Ip6FragCreates"),
    ("discard-cannot-fragment", "datagram%s that can't be fragmented", True, "Ip6FragFails"),
    ("discard-scope-violations", "packet%s that violated scope rules", True, None),
    ("multicast-no-join-packets", "multicast packet%s which we don't join", True, None),
)
#: ip6_stats' counters printed after the mbuf-statistics container, then the one inside
#: source-address-selection
IP6_AFTER_MBUF: tuple[tuple[str, str, bool, str | None], ...] = (
    ("dropped-header-too-long", "packet%s whose headers are not contiguous", True, None),
    ("discard-tunnel-no-gif", "tunneling packet%s that can't find gif", True, None),
    ("dropped-too-many-headers", "packet%s discarded because of too many headers", True, None),
)
IP6_SOURCE_FAILURES = ("address-selection-failures", "failure%s of source address selection", True, None)


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
    return {key: 0 if zero or src is None else max(0, int(linux.get(src, 0))) for key, _, _, src in table}


def _line(n: int, text: str, plural: bool) -> str:
    return f"{n} " + (text % ("" if n == 1 else "s") if plural else text)


def text_ip(stats: dict[str, int], sflag: int) -> str:
    """inet.c ip_stats as text: forwarded and fast-forwarded share a line."""
    out = ["ip:\n"]
    for key, text, plural, _ in IP_COUNTERS:
        v = stats[key]
        if not (v or sflag <= 1):
            continue
        if key == "forwarded-packets":
            out.append(f"\t{_line(v, text, plural)}")
        elif key == "fast-forwarded-packets":
            out.append(f" ({_line(v, text, plural)})")
        else:
            out.append(f"\t{_line(v, text, plural)}\n")
        if key == "fast-forwarded-packets" and (stats["forwarded-packets"] or sflag <= 1):
            out.append("\n")
    return "".join(out)


def text_ip6(stats: dict[str, int], sflag: int) -> str:
    """inet6.c ip6_stats as text (no histograms: see the module docstring)."""
    out = ["ip6:\n"]
    for key, text, plural, _ in IP6_COUNTERS:
        if stats[key] or sflag <= 1:
            out.append(f"\t{_line(stats[key], text, plural)}\n")
    out += ["\tMbuf statistics:\n", "\t\t0 one mbuf\n", "\t\t0 one ext mbuf\n", "\t\t0 two or more ext mbuf\n"]
    for key, text, plural, _ in IP6_AFTER_MBUF:
        if stats[key] or sflag <= 1:
            out.append(f"\t{_line(stats[key], text, plural)}\n")
    key, text, plural, _ = IP6_SOURCE_FAILURES
    if stats[key] or sflag <= 1:
        out.append(f"\t{_line(stats[key], text, plural)}\n")
    return "".join(out)


def json_doc(proto: str, stats: dict[str, int], sflag: int, pretty: bool) -> str:
    """The libxo JSON of ip_stats / ip6_stats under netstat's `statistics` container."""
    body: dict = {}
    if proto == "ip":
        for key, _, _, _ in IP_COUNTERS:
            if stats[key] or sflag <= 1:
                body[key] = stats[key]
    else:
        for key, _, _, _ in IP6_COUNTERS:
            if stats[key] or sflag <= 1:
                body[key] = stats[key]
        body["mbuf-statistics"] = {"one-mbuf": 0, "one-extra-mbuf": 0, "two-or-more-extra-mbufs": 0}
        for key, _, _, _ in IP6_AFTER_MBUF:
            if stats[key] or sflag <= 1:
                body[key] = stats[key]
        sel: dict = {}
        key = IP6_SOURCE_FAILURES[0]
        if stats[key] or sflag <= 1:
            sel[key] = stats[key]
        body["source-address-selection"] = sel
    doc = {"__version": "1", "statistics": {proto: body}}
    return (json.dumps(doc, indent=2) if pretty else json.dumps(doc)) + "\n"


def stats_of(proto: str, zero: bool = False) -> dict[str, int]:
    """Every FreeBSD counter of ``proto`` (ip | ip6) now."""
    linux = {} if zero else linux_counters()
    if proto == "ip":
        return values(IP_COUNTERS, linux, zero)
    return {**values(IP6_COUNTERS, linux, zero), **values(IP6_AFTER_MBUF, linux, zero),
            **values((IP6_SOURCE_FAILURES,), linux, zero)}
