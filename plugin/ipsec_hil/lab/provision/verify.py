"""Where each initiated child really lives, on both ends, and what a teardown left behind.

Why: ``swanctl --initiate`` printing "established" only says the initiator got a CHILD_SA.
Real strongSwan 5.9.8 (tests/interop) showed that with shared identities and a lab
connection whose selectors cover the children, the initiator reuses the lab connection's
IKE_SA and the peer NARROWS its own lab child: six "established" on the initiator, and on
the peer six copies of ``hil-npu-...-net`` and no IKE_SA of the tunnel at all. So a child
counts as up only when both ends list it INSTALLED, under the plan's child name, inside an
IKE_SA named the plan's connection. The two ends' halves are paired by SPI (the
initiator's inbound SPI is the peer's outbound one), which is the only thing they share.

Pure functions over the parsers' ``SaList`` (one ``--list-sas`` per end, whatever the
number of children): the provisioner reads, this module judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence


@dataclass(frozen=True)
class Placement:
    """One initiated child as both ends list it. ``None`` for an end that does not list it."""

    child: str  # the plan's child name
    conn: str  # the plan's connection name
    initiator: tuple[str, str] | None  # (IKE_SA name, CHILD_SA name) found on the initiator
    responder: tuple[str, str] | None  # (IKE_SA name, CHILD_SA name) found on the responder

    @property
    def ok(self) -> bool:
        want = (self.conn, self.child)
        return self.initiator == want and self.responder == want

    def problem(self, initiator_name: str, responder_name: str) -> str | None:
        """Why the child does not count (None when it does), naming what each end used."""
        if self.ok:
            return None
        parts = []
        for who, got in ((initiator_name, self.initiator), (responder_name, self.responder)):
            if got is None:
                parts.append(f"{who} lists no INSTALLED CHILD_SA with its SPIs")
            elif got != (self.conn, self.child):
                parts.append(f"{who} installed it as {got[1]} in IKE_SA {got[0]}")
        return "; ".join(parts)


SpiIndex = dict[tuple[str, str], tuple[str, str]]


def installed_by_spis(sas: Any) -> SpiIndex:
    """(spi_in, spi_out) -> (IKE_SA name, CHILD_SA name) of every INSTALLED child one end
    lists: built once per listing, so placing N children costs N look-ups, not N scans."""
    return {(c.spi_in, c.spi_out): (ike.name, c.name) for ike, c in sas.children()
            if c.state == "INSTALLED" and c.spi_in and c.spi_out}


def place(conn: str, child: str, outcome: Any, initiator: SpiIndex, responder: SpiIndex) -> Placement:
    """Find the child an ESTABLISHED ``outcome`` (parsers.swanctl_initiate) made, on both ends
    (:func:`installed_by_spis` of each end's listing).

    The initiator's in/out SPIs are the responder's out/in SPIs.
    """
    return Placement(child, conn, initiator.get((outcome.spi_in, outcome.spi_out)),
                     responder.get((outcome.spi_out, outcome.spi_in)))


def foreign_connections(placements: Iterable[Placement]) -> dict[str, list[str]]:
    """responder's (IKE_SA name / CHILD_SA name) -> plan children it holds, for every child the
    peer installed outside the plan's connection: the connection the peer really used."""
    out: dict[str, list[str]] = {}
    for p in placements:
        if p.responder is not None and p.responder != (p.conn, p.child):
            out.setdefault(f"{p.responder[0]} (as {p.responder[1]})", []).append(p.child)
    return out


def strays(conn: str, outcomes: Mapping[str, Any], sas: Any) -> list[tuple[int, str]]:
    """(uniqueid, IKE_SA name) of each child this end (the initiator) lists with the SPIs of
    an ESTABLISHED outcome but NOT inside an IKE_SA named ``conn``: terminating ``--ike conn``
    would not remove it. Matched by SPIs, not by the outcome's unique id alone: after a
    restart of charon unique ids start again at 1 and could name someone else's child."""
    ours = {(r.spi_in, r.spi_out) for r in outcomes.values() if r.ok and r.spi_in and r.spi_out}
    return [(c.uniqueid, ike.name) for ike, c in sas.children()
            if (c.spi_in, c.spi_out) in ours and ike.name != conn]


def leftovers(conn: str, children: Sequence[str], spis: Iterable[str], sas: Any) -> list[str]:
    """What one end still lists of the plan after teardown: an IKE_SA named ``conn``, a
    CHILD_SA named like one of the plan's children, or one carrying an SPI the bring-up
    negotiated (a child the peer filed under another connection)."""
    names, spiset = set(children), {s for s in spis if s}
    out = []
    for ike in sas.ike_sas:
        if ike.name == conn:
            out.append(f"IKE_SA {ike.name} #{ike.uniqueid} ({ike.state})")
        for c in ike.children:
            if c.name in names or {c.spi_in, c.spi_out} & spiset:
                out.append(f"CHILD_SA {c.name} #{c.uniqueid} ({c.state}) in IKE_SA {ike.name}")
    return out


def summarize(items: Sequence[str], shown: int = 5) -> str:
    """The first ``shown`` items and how many more (a teardown of 256 children that failed
    should say so in one line, not 256)."""
    head = ", ".join(items[:shown])
    return head + (f" and {len(items) - shown} more" if len(items) > shown else "")


def negotiated_spis(outcomes: Mapping[str, Any]) -> set[str]:
    """Every SPI the initiate outcomes name (both directions)."""
    return {s for r in outcomes.values() for s in (r.spi_in, r.spi_out) if s}
