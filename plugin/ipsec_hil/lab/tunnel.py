"""An active tunnel: one tunnel case built on both ends, and what a test reads of it.

Why a library object with properties: a test asks the tunnel for its path MTU, its ends'
ciphers, its throughput floor and its counter references (``tunnel.path_mtu``,
``tunnel.remote_cipher``, ``tunnel.floor(via_bench=True)``) instead of reaching through
the plan, the lab and the topology; where a fact is computed stays one place, behind one
property. :func:`bring_up` is what the ``tunnel`` fixture does, usable from a prompt::

    with Lab.connect(topology) as lab, bring_up(lab, tunnel_cases(topology)[0], run_id="x") as t:
        print(t.path_mtu, t.bringup)
"""

from __future__ import annotations

import contextlib
import getpass
import ipaddress
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ipsec_hil.lab.expectations import expect
from ipsec_hil.lab.appliance import Appliance
from ipsec_hil.lab.cases import TunnelCase
from ipsec_hil.lab.expectations.hardware import KnownIssue
from ipsec_hil.lab.live_lab import Lab
from ipsec_hil.lab.sharing.holds import left_for_new_holder
from ipsec_hil.lab.sharing.lock import ApplianceLock
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.measuring import offload
from ipsec_hil.lab.measuring.measure import Ledger, expect_conserved, expect_equal, expect_zero
from ipsec_hil.lab.parsers.setkey import SadDump
from ipsec_hil.lab.provision import ChildPlan, EndPlan, TunnelPlan, TunnelProvisioner, child_plans, render_masked
from ipsec_hil.lab.topology import Topology, TunnelConfig
from ipsec_hil.lab.traffic.bench import BenchHost

#: A tolerance for an equality on a congested link when the topology names none (0.1 %).
DEFAULT_CONGESTED_TOLERANCE = 0.001


class TunnelInvariants:
    """What every ledger of a tunnel must show, one line of intent each for a test (issue 53):
    ``tunnel.expect_conserved(ledger, why, sender="local", at_least=n)``. Mixed into
    :class:`ActiveTunnel`, which gives the ends (``appliance``, ``offloaded``), their
    counters (``encrypted_refs``, ``decrypted_refs``) and the doors and loss rule between them."""

    def expect_conserved(self, ledger: Ledger, why: str, *, sender: str, at_least: Any, sent: Any = None,
                         received: Any = None, tolerance: float | None = None) -> int:
        """``sent`` (default: what ``sender`` encrypted) = ``received`` (default: what the other
        end decrypted) + ``loss_doors(sender)``, exactly (measure.expect_conserved); the counted
        loss judged by ``loss_rule(sender)`` (or ``tolerance``). Returns the sent count."""
        t: Any = self
        received = t.decrypted_refs("remote" if sender == "local" else "local") if received is None else received
        return expect_conserved(ledger, t.encrypted_refs(sender) if sent is None else sent, received, why,
                                drops=t.loss_doors(sender), at_least=at_least,
                                tolerance=t.loss_rule(sender) if tolerance is None else tolerance)

    def expect_offload_carried(self, ledger: Ledger, why: str) -> None:
        """Every end whose engine holds the associations left its kernel's ESP counters
        where they were: the traffic took the offload path, not the kernel's cipher."""
        t: Any = self
        for end in ("local", "remote"):
            if t.offloaded(end):
                name = t.appliance(end).name
                expect_zero(ledger, expect.kernel_esp_refs(name),
                            f"{why}: {name}'s engine holds the SAs, its kernel ESP does not move")


@dataclass
class ActiveTunnel(TunnelInvariants):
    """A tunnel that is up: its plan, configuration, both appliances and what bring-up saw."""

    case: TunnelCase
    plan: TunnelPlan
    provisioner: TunnelProvisioner
    local: Appliance
    remote: Appliance
    lab: Lab
    locks: tuple[ApplianceLock, ...] = ()

    def check_leases(self) -> None:
        """Raise LeaseLost when another run took either end's lease (ipsec_hil.lab.sharing.lock).

        Called before every test on the tunnel: a run whose lease was broken or taken over
        must stop at once instead of driving an appliance someone else now owns.
        """
        for lock in self.locks:
            lock.check()

    # ------------------------------------------------------------ what it is

    @property
    def name(self) -> str:
        """The topology's name of the tunnel (``tunnels.<name>``)."""
        return self.case.tunnel

    @property
    def config(self) -> TunnelConfig:
        return self.case.config

    @property
    def topology(self) -> Topology:
        return self.lab.topology

    @property
    def bench(self) -> BenchHost | None:
        return self.lab.bench

    @property
    def conn(self) -> str:
        return self.provisioner.conn

    @property
    def children(self) -> list[ChildPlan]:
        return child_plans(self.plan, self.config)

    @property
    def bringup(self):
        return self.provisioner.bringup

    def appliance(self, end: str) -> Appliance:
        return self.local if end == "local" else self.remote

    def end(self, end: str) -> EndPlan:
        return self.plan.end(end)

    @property
    def esn(self) -> bool:
        """Were the children proposed with extended sequence numbers only (``-esn``)?"""
        return self.plan.esn

    @property
    def replay_window(self) -> int | None:
        """The children's ``replay_window`` the tunnel asks for (None: strongSwan's 32)."""
        return self.plan.replay_window

    # ------------------------------------------------------------ ciphers and limits

    @property
    def local_cipher(self) -> str:
        """``offload`` (the engine holds the SA) or ``kernel`` on the local end."""
        return self.plan.local.cipher

    @property
    def remote_cipher(self) -> str:
        return self.plan.remote.cipher

    def offloaded(self, end: str) -> bool:
        """Does ``end``'s engine hold the associations (not the kernel's cipher)?"""
        return self.plan.end(end).cipher != "kernel"

    @property
    def path_mtu(self) -> int:
        """The tunnel's path MTU (``Topology.path_mtu``: the one definition, one MTU per tunnel)."""
        return self.topology.path_mtu(self.name)

    def floor(self, *, via_bench: bool) -> expect.Floor:
        """The least acceptable rate through the tunnel (``via_bench``: traffic forwarded from the bench)."""
        return expect.throughput_floor(self.topology, self.name, self.config, via_bench=via_bench)

    def tolerance(self, kind: str = "congested") -> float:
        """The topology's relative tolerance for an equality of ``kind`` (0.1 % when it names none)."""
        return float(self.plan.tolerance.get(kind, DEFAULT_CONGESTED_TOLERANCE))

    def loss_rule(self, sender: str) -> float:
        """The loss rule of ``sender``'s doors (Tolerance): ``congested`` where its engine
        holds the SAs, ``kernel_sender`` where the kernel's cipher runs them."""
        return self.tolerance("congested" if self.offloaded(sender) else "kernel_sender")

    def known_issue(self, key: str) -> KnownIssue | None:
        """The local appliance's open issue ``key`` (its profile's known issues), if any."""
        return self.local.profile.known_issue(key)

    def encrypted_refs(self, end: str) -> list[str]:
        """Ledger references whose deltas sum to the packets ``end`` encrypted (engine or kernel)."""
        app = self.appliance(end)
        return expect.encrypted_refs(app.name, app.profile, kernel_cipher=not self.offloaded(end))

    def decrypted_refs(self, end: str) -> list[str]:
        """Ledger references whose deltas sum to the packets ``end`` decrypted and handed up."""
        app = self.appliance(end)
        return expect.decrypted_refs(app.name, app.profile, kernel_cipher=not self.offloaded(end))

    def loss_doors(self, sender: str) -> list[str]:
        """The doors between ``sender``'s encryptions and the other end's decryptions
        (expect.loss_doors says which and why): a ledger closes on them (issue 52)."""
        receiver = "remote" if sender == "local" else "local"
        s_app, r_app = self.appliance(sender), self.appliance(receiver)
        return expect.loss_doors(s_app.name, s_app.profile, self.plan.end(sender).port, r_app.name,
                                 self.plan.end(receiver).port, kernel_cipher=not self.offloaded(sender))

    def least_stream_packets(self, result: Any) -> int:
        """The fewest data packets that carried what an iperf3 ``result``'s receiver got:
        its received bytes over the largest TCP payload the tunnel's path fits."""
        return expect.least_packets(result.received_bytes, expect.largest_tcp_payload(self.config, self.path_mtu))

    # ------------------------------------------------------------ the offload framework's door

    def own_addresses(self, end: str) -> list[str]:
        """Every address of ``end``'s appliance in the lab file (all its ports, both families)."""
        host = self.topology.hosts[self.appliance(end).name]
        return [str(a.ip) for p in host.ports.values() for a in (p.ipv4, p.ipv6) if a is not None]

    def offload_door(self, ledger: Ledger, end: str, way: str) -> list[str] | None:
        """Ledger references of the hw offl packets of ``end``'s SAs going ``way`` (``out`` /
        ``in``: every SA of the appliance, as its driver's counters are the appliance's),
        those in both snapshots; None when there is no door: the end runs the kernel's
        cipher, or its kernel has no offload framework (measuring.offload)."""
        if not self.offloaded(end):
            return None
        d = ledger.deltas.get(self.appliance(end).name)
        if d is None or not d.after.sas:
            return None
        name = d.appliance
        refs = offload.door_refs(name, d.after.sas, self.own_addresses(end), way)
        return [r for r in refs if r.split(":", 1)[1] in d]

    def expect_offload_door(self, ledger: Ledger, why: str, *, sender: str, at_least: int | None = None) -> int:
        """On every end whose kernel has the offload framework (FreeBSD 15) and whose NIC
        holds the SAs, the SAs' hw offl packets are one more door of the ledger, exact:
        outbound = what the end's driver counted as encrypted, inbound = what it counted as
        decrypted and handed up, and each conserved against the peer's ESP input / output
        as the driver's own counters are (the same drops and congested tolerance).
        ``sender``'s outbound door must carry ``at_least`` packets. Returns the number of
        doors checked (0 on FreeBSD 14: no such door, nothing to check)."""
        checked = 0
        for end in ("local", "remote"):
            other = "remote" if end == "local" else "local"
            name = self.appliance(end).name
            out_door, in_door = self.offload_door(ledger, end, "out"), self.offload_door(ledger, end, "in")
            if out_door is None or in_door is None:
                continue
            least = at_least if end == sender else None
            least_in = at_least if other == sender else None
            expect_equal(ledger, out_door, self.encrypted_refs(end),
                         f"{why}: {name}'s SAs out through the NIC (hw offl) = what its driver encrypted",
                         at_least=least)
            self.expect_conserved(ledger, f"{why}: {name}'s hw offl out = what {self.appliance(other).name} decrypted",
                                  sender=end, sent=out_door, at_least=least)
            expect_equal(ledger, in_door, self.decrypted_refs(end),
                         f"{why}: {name}'s SAs in through the NIC (hw offl) = what its driver decrypted and handed up",
                         at_least=least_in)
            self.expect_conserved(ledger, f"{why}: what {self.appliance(other).name} encrypted = {name}'s hw offl in",
                                  sender=other, received=in_door, at_least=least_in)
            checked += 2
        return checked

    def sa_paths(self, end: str, ledger: Ledger, before: SadDump | None = None,
                 after: SadDump | None = None) -> list[offload.SaPath]:
        """Which path each of this tunnel's SAs on ``end`` took over the ``ledger``'s
        measurement (measuring.offload): on a kernel with the offload framework from the
        SAs' own hw offl counts in the ledger's snapshots; without one from setkey -D
        ``before`` / ``after`` (the SAs' packet counts, which the caller reads around the
        measurement) against the driver's and the kernel's ESP counters of each direction
        -- a judgement only valid when the measured traffic was this tunnel's alone."""
        app = self.appliance(end)
        mine = self.spis(app)
        own = self.own_addresses(end)
        d = ledger.deltas[app.name]
        if d.after.sas:
            was = {s.spi: s for s in d.before.sas}
            return [offload.judge_framework(app.name, offload.direction(s.src, s.dst, own) or "?", was[s.spi], s)
                    for s in d.after.sas if s.spi in mine and s.spi in was]
        if before is None or after is None:
            raise LabError(f"{app.name}: no offload framework in its kernel: sa_paths needs setkey -D before and after")
        refs = {"out": (expect.encrypted_refs(app.name, app.profile), ["esp.sent-packets"]),
                "in": (expect.decrypted_refs(app.name, app.profile), ["esp.received-packets"])}
        was_e = {e.spi: e for e in before.entries}
        out = []
        for e in after.entries:
            if e.spi not in mine or e.spi not in was_e:
                continue
            way = offload.direction(e.src, e.dst, own) or "?"
            if way not in refs:
                continue
            drv, ker = refs[way]
            kernel_refs = [f"{app.name}:{k}" for k in ker]
            out.append(offload.judge_counters(
                app.name, e.spi, way, int(e.allocations or 0) - int(was_e[e.spi].allocations or 0),
                ledger.value(drv), ledger.value(kernel_refs), [r.split(":", 1)[1] for r in drv], ker))
        return out

    # ------------------------------------------------------------ addresses

    def inner_address(self, end: str) -> str:
        """The ``end`` appliance's own address on its LAN in the inner family."""
        return str(ipaddress.ip_interface(self.plan.end(end).lan_if[self.config.inner]).ip)

    def inner_prefix(self, end: str) -> str:
        """``inner_address(end)`` as a host route (``/32`` or ``/128``)."""
        return f"{self.inner_address(end)}/{32 if self.config.inner == 'ipv4' else 128}"

    def outer_address(self, end: str) -> str:
        """The ``end`` appliance's outer address in the outer family."""
        return self.plan.end(end).outer_addr(self.config.outer)

    def lan_net(self, end: str) -> str:
        """The ``end`` LAN's network in the inner family (the child's selector)."""
        return self.plan.end(end).lan_net(self.config.inner)

    def outer_ifname(self, end: str) -> str:
        """The OS's name of ``end``'s outer port (where a capture listens)."""
        return self.plan.end(end).port_ifname

    def bench_inner_address(self, end: str) -> str | None:
        """The bench's address on ``end``'s LAN in the inner family (None if not wired)."""
        e = self.plan.end(end)
        found = self.lab.bench_port_facing(e.host, e.lan)
        if found is None:
            return None
        v = getattr(found[1], self.config.inner, None)
        return str(ipaddress.ip_interface(str(v)).ip) if v else None

    def bench_lan_mtu(self, end: str) -> int:
        """The MTU a forwarded packet from the bench meets first: the smaller of the bench's
        port and the appliance's LAN port on ``end``'s side."""
        e = self.plan.end(end)
        lan = self.topology.port(e.host, e.lan).mtu
        found = self.lab.bench_port_facing(e.host, e.lan)
        return min(lan, found[1].mtu) if found else lan

    # ------------------------------------------------------------ life

    def masked_conf(self, end: str) -> str:
        return render_masked(self.plan, self.config, end)

    def reestablish(self) -> None:
        """After a reboot: the kept configuration loaded again and every child up."""
        self.provisioner.reestablish()

    def renew_children(self) -> None:
        """Fresh associations for every child: each closed from the local end, then the
        tunnel's children initiated again (what a rekey gives, without waiting for one).
        Why: a test that moved an association's sequence numbers -- injected frames past
        the tunnel's own, an outbound counter started near 2^32 -- leaves the next test a
        window or a counter it cannot reason about."""
        for c in self.children:
            self.local.swanctl_terminate(child=c.name).check(f"terminating child {c.name}")
        self.reestablish()

    def spis(self, app: Appliance) -> set[int]:
        """This tunnel's SPIs (both directions) on ``app``, from ``swanctl --list-sas``."""
        out: set[int] = set()
        for ike in app.list_sas().ike_sas:
            if ike.name == self.conn:
                for c in ike.children:
                    out |= {int(s, 16) for s in (c.spi_in, c.spi_out) if s}
        return out

    def close(self) -> list[str]:
        """Tear the tunnel down now (idempotent: the fixture's own teardown is then a no-op)."""
        return self.provisioner.down()

    def backups(self) -> list[tuple[str, Any]]:
        """(appliance, files.Backup) of every file the tunnel's transactions saved."""
        return self.provisioner.backups()


@contextlib.contextmanager
def bring_up(lab: Lab, case: TunnelCase, *, run_id: str, keep: bool = False, lock_wait: float = 600,
             announce: Callable[[str, str], None] | None = None) -> Iterator[ActiveTunnel]:
    """Build ``case`` on both ends (one transaction), yield it, tear it down after.

    Both appliances are locked for the tunnel's whole life (two runs never interleave on
    one appliance); a dead run's journal is recovered under the lock. ``announce(conn,
    masked local swanctl.conf)`` is told before provisioning (the plugin attaches it to
    Allure). Bring-up is all or nothing: ProvisionError when a child does not come up.
    """
    topo = lab.topology
    plan = TunnelPlan.from_topology(topo, case.tunnel)
    psk = topo.tunnels[case.tunnel].psk.read()
    local, remote = lab.appliances[plan.local.host], lab.appliances[plan.remote.host]
    holder = f"{getpass.getuser()}@{socket.gethostname()}: pytest {case.id}"
    locks: list[ApplianceLock] = []
    with contextlib.ExitStack() as stack:
        for app in (local, remote):
            lock = ApplianceLock(app.host, holder, run_id=run_id, wait=lock_wait, poll=2)
            lock.acquire()
            stack.callback(lock.release)
            locks.append(lock)
        lab.recover_once(local, remote)  # both ends at once: routes before SAs
        prov = TunnelProvisioner({local.name: local, remote.name: remote}, plan, case.config, psk,
                                 run_id=run_id, keep=keep)
        if announce is not None:
            announce(prov.conn, render_masked(plan, case.config, "local"))
        prov.up()
        try:
            yield ActiveTunnel(case, plan, prov, local, remote, lab, tuple(locks))
        finally:
            # a lost end is fenced: no teardown there; its journal is the new holder's to recover
            if not left_for_new_holder(locks, f"tunnel {case.id} (connection {prov.conn}: its swanctl.conf, "
                                              "SAs and policies)"):
                prov.down()
