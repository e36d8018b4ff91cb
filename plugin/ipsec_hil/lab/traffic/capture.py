"""Capture on an appliance's port with tcpdump, and read the ESP that crossed the wire.

Why on the appliance: between two appliances there is no bench port to listen on; both
FreeBSD and the virtual lab have tcpdump, so the capture runs where the wire is, writes a
pcap there, and the suite fetches it over SFTP and analyses it locally with scapy.
Decryption keys come from ``setkey -D`` and stay in memory: never logged, never attached.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import shlex
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Iterable

from ipsec_hil.lab.command import TCPDUMP_WRITE
from ipsec_hil.lab.errors import InvariantError, LabError

log = logging.getLogger(__name__)


class CaptureError(LabError):
    """tcpdump did not start, its file could not be read, or the kernel dropped packets from it."""


#: seconds the capture file must stop growing before tcpdump is stopped, when its counts
#: cannot prove it has caught up (WireCapture.__exit__)
QUIET_S = 0.2

#: tcpdump's answer to SIGINFO (FreeBSD) or SIGUSR1 (Linux) on stderr, the one-line form:
#: "tcpdump: 10 packets captured, 10 packets received by filter, 0 packets dropped by kernel"
#: (", N packets dropped by interface" may follow)
#: Written once for both readers: Python's ``re`` and the stop script's awk (POSIX ERE).
STATUS_LINE = "[0-9]+ packets? captured, [0-9]+ packets? received by filter, [0-9]+ packets? dropped by kernel"

#: seconds between two asks for tcpdump's counts (and two looks at the file's size)
_POLL_S = 0.01


@dataclass(frozen=True)
class CaptureCounts:
    """One of tcpdump's status lines: what it wrote, what its kernel filter saw, what the
    kernel dropped because tcpdump's buffer was full."""

    captured: int
    received: int
    dropped: int

    @property
    def caught_up(self) -> bool:
        """Every packet the kernel handed to this capture is written or dropped.

        Sound on both systems: Linux counts what passed the filter, FreeBSD's BPF every
        packet on the interface (``bd_rcount``), so "received" is never below what
        tcpdump could have written. Equality fails for good on Linux's ``lo`` (each
        packet seen twice) and on FreeBSD when packets the filter refuses cross the port;
        the stop then waits for the file to be quiet instead."""
        return self.captured + self.dropped >= self.received


def last_counts(log_text: str) -> CaptureCounts | None:
    """The last complete status line in tcpdump's stderr, or None when there is none."""
    found = re.findall(STATUS_LINE, log_text)
    return CaptureCounts(*map(int, re.findall("[0-9]+", found[-1]))) if found else None


def caught_up_command(log_q: str) -> str:
    """A shell command that succeeds when the last status line in the (quoted) log says
    tcpdump has caught up: :attr:`CaptureCounts.caught_up` in awk, for the stop script.
    The line's words 1, 4 and 9 are captured, received and dropped."""
    return (f"awk 'match($0, /{STATUS_LINE}/) {{ split(substr($0, RSTART, RLENGTH), w, \" \"); "
            f"c = w[1]; r = w[4]; d = w[9]; seen = 1 }} END {{ exit !(seen && c + d >= r) }}' {log_q}")


class WireCapture:
    """``with WireCapture(appliance.host, "wan10g") as cap: ...`` then ``cap.pcap`` (bytes)."""

    def __init__(self, host: Any, ifname: str, bpf: str = "not tcp port 22", snaplen: int = 0) -> None:
        self.host, self.ifname, self.bpf, self.snaplen = host, ifname, bpf, snaplen
        self.path = f"/tmp/hil-capture-{ifname}-{int(time.time() * 1000) % 10**9}.pcap"
        self.pid: int | None = None
        self.pcap: bytes = b""
        #: tcpdump's last status line before it was stopped (None: it printed none)
        self.counts: CaptureCounts | None = None

    def __enter__(self) -> "WireCapture":
        log_path = self.path + ".log"
        # --immediate-mode: without it libpcap's ring buffer keeps the last packets and a
        # SIGINT loses them ("6 received by filter, 0 captured"); FreeBSD's tcpdump has it too.
        cmd = TCPDUMP_WRITE("-s", str(self.snaplen), "-i", self.ifname, "-w", self.path, *shlex.split(self.bpf))
        s = "\n".join([
            f"nohup {cmd} > {shlex.quote(log_path)} 2>&1 < /dev/null &",
            "pid=$!",
            "i=0",
            "while [ $i -lt 250 ]; do",  # looked for every 20 ms (5 s in all): it listens within tens of ms
            f"  if grep -q 'listening on' {shlex.quote(log_path)} 2>/dev/null; then echo \"$pid\"; exit 0; fi",
            "  kill -0 $pid 2>/dev/null || break",
            "  sleep 0.02; i=$((i+1))",
            "done",
            f"cat {shlex.quote(log_path)} >&2; kill $pid 2>/dev/null; exit 3",
        ])
        r = self.host.run(s, timeout=30)
        if r.status != 0:
            raise CaptureError(f"{self.host.name}: tcpdump on {self.ifname} did not start: {r.stderr.strip()[-300:]}")
        self.pid = int(r.stdout.strip().splitlines()[-1])
        return self

    def _stop_script(self) -> str:
        """Stop tcpdump once it has written every packet of the block, and print its log.

        The block's packets have crossed the port when it returns (its pings answered, its
        END datagram received); what may lag is tcpdump writing them (-U: one write per
        packet). Asked for its counts (SIGINFO on FreeBSD, SIGUSR1 on Linux, every 10 ms),
        tcpdump proves it has caught up when it has written all its kernel handed it: the
        usual case, a few tens of ms (issue 15: a fixed 0.25 s quiet wait before, 25
        captures a run). Where its counts cannot prove it (see CaptureCounts.caught_up),
        the file must stop growing for QUIET_S -- and it is stopped later while it grows.
        SIGINT makes tcpdump flush and close the file; it is waited for before the read."""
        q, log_q, pid = shlex.quote(self.path), shlex.quote(self.path + ".log"), self.pid
        polls = round(QUIET_S / _POLL_S)
        caught_up = caught_up_command(log_q)
        return (
            f"last=-1; same=0; i=0\n"
            f"while [ $same -lt {polls} ] && [ $i -lt {round(10 / _POLL_S)} ]; do\n"
            f"  kill -INFO {pid} 2>/dev/null || kill -USR1 {pid} 2>/dev/null\n"
            f"  sleep {_POLL_S}; i=$((i+1))\n"
            f"  {caught_up} && break\n"
            f"  n=$(wc -c < {q} 2>/dev/null || echo 0)\n"
            f"  if [ \"$n\" = \"$last\" ]; then same=$((same+1)); else same=0; last=$n; fi\n"
            f"done\n"
            f"kill -INT {pid} 2>/dev/null; i=0\n"
            f"while kill -0 {pid} 2>/dev/null && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done\n"
            f"kill {pid} 2>/dev/null; cat {log_q} 2>/dev/null; true")

    def __exit__(self, *exc: object) -> None:
        r = self.host.run(self._stop_script(), timeout=30)
        self.counts = last_counts(r.stdout)
        try:
            self.pcap = self.host.read_file(self.path)
        except LabError as e:
            if exc[0] is None:
                raise CaptureError(f"{self.host.name}: cannot read {self.path}: {e}") from None
            # the block's own error is the one to raise; the lost capture is only logged
            log.warning("%s: capture %s not read: %s", self.host.name, self.path, e)
        finally:
            for path in (self.path, self.path + ".log"):
                self.host.remove(path)
        if self.counts is not None and self.counts.dropped and exc[0] is None:
            # a packet missing from the capture could be the one a test looks for (a leak, a fragment)
            raise CaptureError(f"{self.host.name}: the capture on {self.ifname} is incomplete: the kernel "
                               f"dropped {self.counts.dropped} of the {self.counts.received} packets it saw")


@dataclass(frozen=True)
class WirePacket:
    """One captured IP packet: who, what protocol, how long, and the raw bytes."""

    src: str
    dst: str
    proto: int  # IP protocol / IPv6 next header (50 = ESP, 17 = UDP, 58 = ICMPv6, 1 = ICMP)
    length: int  # the IP packet's length (header included)
    dport: int | None
    raw: bytes
    fragment: bool = False


def packets(pcap: bytes) -> list[WirePacket]:
    """Every IP packet in a pcap (Ethernet, raw IP or Linux cooked), in order.

    Read with :mod:`struct` for the link types and file formats tcpdump writes (classic
    pcap, either byte order, micro- or nanosecond); anything else (pcapng, another link
    type) goes through scapy's reader. Why not scapy always: it took 3.4 s for the ~8,900
    packets of an every-size sweep on a 9,000-byte path (issue 15); this takes ~0.05 s.
    tests/wire/test_pcap_reader.py compares the two readers packet for packet.
    """
    fast = _packets_struct(pcap)
    return fast if fast is not None else _packets_scapy(pcap)


_PCAP_MAGIC = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",
               b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}
#: link type -> how to find the IP packet in a record: (header length, offset of the
#: 16-bit ethertype or None when the header says nothing and IP follows at once)
_LINK = {1: (14, 12), 101: (0, None), 12: (0, None), 14: (0, None), 113: (16, 14), 276: (20, 0)}
_IPV6_EXT = (0, 43, 60)  # hop-by-hop, routing, destination options: skipped to the next header


def _packets_struct(pcap: bytes) -> list[WirePacket] | None:
    """The fast reader; None when the file is not one it knows (scapy reads it then)."""
    order = _PCAP_MAGIC.get(pcap[:4])
    if order is None or len(pcap) < 24:
        return None
    link = struct.unpack(order + "I", pcap[20:24])[0] & 0x0FFFFFFF
    if link not in _LINK:
        return None
    head_len, type_at = _LINK[link]
    out: list[WirePacket] = []
    off = 24
    while off + 16 <= len(pcap):
        incl = struct.unpack(order + "I", pcap[off + 8:off + 12])[0]
        rec = pcap[off + 16:off + 16 + incl]
        off += 16 + incl
        start = head_len
        if type_at is not None:
            if len(rec) < head_len:
                continue
            ethertype = struct.unpack("!H", rec[type_at:type_at + 2])[0]
            if link == 1 and ethertype == 0x8100 and len(rec) >= 18:  # one 802.1Q tag
                ethertype, start = struct.unpack("!H", rec[16:18])[0], 18
            if ethertype not in (0x0800, 0x86DD):
                continue
        pkt = _ip_packet(rec[start:])
        if pkt is not None:
            out.append(pkt)
    return out


def _ip_packet(ip: bytes) -> WirePacket | None:
    """One IPv4 or IPv6 packet (as captured, perhaps cut by the snap length) -> WirePacket."""
    if len(ip) < 20:
        return None
    version = ip[0] >> 4
    if version == 4:
        ihl = (ip[0] & 0x0F) * 4
        total, flags_frag, proto = struct.unpack("!H", ip[2:4])[0], struct.unpack("!H", ip[6:8])[0], ip[9]
        offset, more = flags_frag & 0x1FFF, bool(flags_frag & 0x2000)
        dport = _dport(ip, ihl) if proto == 17 and offset == 0 else None
        return WirePacket(socket.inet_ntop(socket.AF_INET, ip[12:16]), socket.inet_ntop(socket.AF_INET, ip[16:20]),
                          proto, total, dport, ip[:total], more or offset > 0)
    if version == 6 and len(ip) >= 40:
        plen, nh = struct.unpack("!H", ip[4:6])[0], ip[6]
        src, dst = socket.inet_ntop(socket.AF_INET6, ip[8:24]), socket.inet_ntop(socket.AF_INET6, ip[24:40])
        at, first_nh, frag, offset = 40, nh, False, 0
        while nh in _IPV6_EXT and at + 2 <= len(ip):
            nh, at = ip[at], at + (ip[at + 1] + 1) * 8
        if nh == 44 and at + 8 <= len(ip):
            frag, offset = True, struct.unpack("!H", ip[at + 2:at + 4])[0] >> 3
            nh, at = ip[at], at + 8
        dport = _dport(ip, at) if nh == 17 and offset == 0 else None
        return WirePacket(src, dst, nh if frag else first_nh, plen + 40, dport, ip[:plen + 40], frag)
    return None


def _dport(ip: bytes, at: int) -> int | None:
    return struct.unpack("!H", ip[at + 2:at + 4])[0] if at + 4 <= len(ip) else None


def _packets_scapy(pcap: bytes) -> list[WirePacket]:
    """scapy's reading of a pcap (any format scapy knows)."""
    import io

    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
    from scapy.utils import PcapReader

    out = []
    with PcapReader(io.BytesIO(pcap)) as reader:
        for pkt in reader:
            if IP in pkt:
                ip = pkt[IP]
                frag = bool(ip.flags.MF) or ip.frag > 0
                dport = pkt[UDP].dport if UDP in pkt else None
                out.append(WirePacket(ip.src, ip.dst, ip.proto, ip.len, dport, bytes(ip), frag))
            elif IPv6 in pkt:
                ip6 = pkt[IPv6]
                frag = IPv6ExtHdrFragment in pkt
                nh = ip6.nh if not frag else pkt[IPv6ExtHdrFragment].nh
                dport = pkt[UDP].dport if UDP in pkt else None
                out.append(WirePacket(ip6.src, ip6.dst, nh, ip6.plen + 40, dport, bytes(ip6), frag))
    return out


def capture_pings(tunnel: Any, sizes: Iterable[int]) -> list[WirePacket]:
    """The packets on the local end's outer port while its appliance pings the remote end's
    inner address for each ping data size in ``sizes`` (controlled inner lengths), once
    unless an echo is lost.

    Why one function: every wire test (plain ESP, NAT-T) runs this same experiment and
    then reads the capture its own way. A ping the tunnel did not answer leaves the
    capture without the packets it is read for, so it fails here
    (:class:`InvariantError`) rather than as a missing length later."""
    app = tunnel.local
    src, dst = tunnel.inner_address("local"), tunnel.inner_address("remote")
    with WireCapture(app.host, tunnel.outer_ifname("local")) as cap:
        for size in sizes:
            # up to three single pings: one echo lost on a loaded lab must not fail a wire test
            # (its readers take the set of lengths, so a repeated size adds nothing), while a
            # tunnel that answers none of them still fails here
            for _ in range(3):
                r = app.ping(dst, size=size, count=1, source=src)
                if r.received:
                    break
            else:
                raise InvariantError(f"{app.name}: a {size}-byte ping through the tunnel {tunnel.name} "
                                     f"was not answered, three times ({r.errors})")
    return packets(cap.pcap)


#: setkey's algorithm name -> scapy's (encryption, authentication). FreeBSD's setkey names
#: AES-CBC "rijndael-cbc" (its old name); "aes-cbc" is accepted too.
SCAPY_ALGS = {
    "aes-gcm-16": ("AES-GCM", None),
    "rijndael-cbc": ("AES-CBC", "SHA2-256-128"),
    "aes-cbc": ("AES-CBC", "SHA2-256-128"),
}


def decrypt(packet: WirePacket, entry: Any) -> Any:
    """Decrypt one ESP packet with a ``setkey -D`` entry's algorithms and keys -> inner scapy packet."""
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.ipsec import ESP, SecurityAssociation

    try:
        crypt, auth = SCAPY_ALGS[entry.enc_alg]
    except KeyError:
        raise CaptureError(f"no scapy algorithm for {entry.enc_alg!r}") from None
    kwargs: dict[str, Any] = dict(crypt_algo=crypt, crypt_key=bytes.fromhex(entry.enc_key))
    if auth:
        kwargs.update(auth_algo=auth, auth_key=bytes.fromhex(entry.auth_key))
    outer_cls = IPv6 if ":" in packet.src else IP
    sa = SecurityAssociation(ESP, spi=entry.spi, tunnel_header=outer_cls(src=packet.src, dst=packet.dst), **kwargs)
    return sa.decrypt(outer_cls(packet.raw))


NATT_PORT = 4500


def is_udp_esp(p: WirePacket) -> bool:
    """ESP in UDP (RFC 3948, NAT-T): an IPv4 datagram to port 4500 whose payload is not the
    non-ESP marker (4 zero bytes: IKE) nor a 1-byte NAT keepalive. ``decrypt`` takes it
    as it is (scapy dissects UDP 4500 as ESP)."""
    if p.proto != 17 or p.dport != NATT_PORT or p.fragment or ":" in p.src:
        return False
    payload = p.raw[(p.raw[0] & 15) * 4 + 8:]
    return len(payload) >= 8 and payload[:4] != b"\0\0\0\0"


def is_esp(p: WirePacket) -> bool:
    """An ESP packet on the wire, plain (protocol 50) or UDP-encapsulated."""
    return p.proto == 50 or is_udp_esp(p)


def is_ike(p: WirePacket) -> bool:
    return p.proto == 17 and p.dport in (500, NATT_PORT) and not is_udp_esp(p)


def addresses(*nets: str) -> list[Any]:
    return [ipaddress.ip_network(n, strict=False) for n in nets]


def inside(addr: str, nets: Iterable[Any]) -> bool:
    a = ipaddress.ip_address(addr)
    return any(a in n for n in nets if n.version == a.version)
