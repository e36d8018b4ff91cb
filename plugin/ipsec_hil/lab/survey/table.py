"""The survey's one table: per host, each read parsed or not, the counters, the offload framework.

Why one table and not a log: the first day on a real lab ends with a fix list, and a
person reads it top to bottom -- which command's output the suite cannot read (with the
first line it could not), which profile counter the driver does not have, which driver
counter nobody checks (with its value), and whether the kernel offloads IPsec itself.
"""

from __future__ import annotations

from ipsec_hil.lab.survey.run import PARSED, SurveyResult


def _row(host: str, what: str, result: str, detail: str = "") -> tuple[str, str, str, str]:
    return host, what, result, detail


def rows(result: SurveyResult) -> list[tuple[str, str, str, str]]:
    out = []
    for h in result.hosts:
        if h.error:
            out.append(_row(h.host, "survey", "NOT SURVEYED", h.error[:300]))
            continue
        for o in h.outcomes:
            if o.state == PARSED and o.read.parser == "ping":
                v = o.value
                refused = f", {v.emsgsize_count} refused (EMSGSIZE)" if v.emsgsize_count else ""
                detail = f"{o.read.why}: {v.received} of {v.transmitted} answered{refused}"
            elif o.state == PARSED:
                detail = f"unknown oid: {', '.join(o.unknown_oids)}" if o.unknown_oids else ""
            elif o.state == "raw":
                detail = f"{o.first_line!r} (saved raw: {o.read.why or 'no parser'})"
            elif o.first_line:
                detail = f"{o.detail.split(': line ')[0]}: {o.first_line[:160]}".replace("\t", "\\t")  # tabs seen
            else:
                detail = o.detail
            out.append(_row(h.host, o.read.name, o.state.upper() if o.state != PARSED else o.state, detail))
        if h.diff is not None:
            d = h.diff
            label = f"counters ({d.model}, {d.driver})"
            if d.matched:
                out.append(_row(h.host, label, "profile matched",
                                f"{len(d.counters_read)} profile OIDs read, no driver counter unnamed"))
            for logical, oid in d.missing.items():
                out.append(_row(h.host, label, "MISSING", f"{logical}: {oid}"))
            for oid, value in d.unknown.items():
                out.append(_row(h.host, label, "UNKNOWN", f"{oid} = {value} (no profile names it)"))
            for p in d.proposals:
                out.append(_row(h.host, label, "PROPOSED",
                                f"{p.logical}: {p.was} -> {p.oid} (name similarity {p.similarity:.2f})"))
        elif h.role == "appliance":
            out.append(_row(h.host, "counters", "NOT COMPARED", "sysctl-profile or the driver tree did not parse"))
        if h.role == "appliance" and not h.error:
            out.append(_row(h.host, "release", "read" if h.release else "NOT READ",
                            h.release or "freebsd-version / opnsense-version did not parse"))
        if h.offload:
            out.append(_row(h.host, "ipsec offload framework", h.offload.split(" (")[0],
                            h.offload.partition(" (")[2].rstrip(")")))
    return out


def render(result: SurveyResult) -> str:
    """The table as text, then the bundle, the proposal and the exit status."""
    header = ("HOST", "WHAT", "RESULT", "DETAIL")
    body = rows(result)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in [header, *body]]
    lines = [l.rstrip() for l in lines]
    lines.append("")
    lines.append(f"bundle: {result.out}")
    if result.proposed_profiles is not None:
        lines.append(f"proposed --hil-profiles file (names matched by similarity, to confirm): {result.proposed_profiles}")
    status = result.exit_status
    why = {0: "everything parsed, every profile matched", 3: "a host could not be surveyed",
           4: "a read was not parsed or failed", 8: "a profile differs from the appliance",
           12: "a read was not parsed or failed, and a profile differs"}[status]
    lines.append(f"exit status {status}: {why}")
    return "\n".join(lines) + "\n"
