"""Building the transmit loop's OutSa from an SA journal entry (ipsec_hil_twin.engine.datapath's
TxLoop.reload): one place for which counters an outbound packet moves on which path."""
from __future__ import annotations

import socket

from ipsec_hil_twin.personality import Counting

from . import netio
from .counters import ALG_OF_CIPHER, HIST_OUT, INDEX, CounterBlock, port_drop
from .esp import make_suite
from .sa_state import OutSa
from .selectors import parse_selector
from .sizes import FRAMING, encap_header


def counter_indexes(names: tuple[str, ...]) -> tuple[int, ...]:
    """The counter block's slot of each name (ipsec_hil_twin.engine.counters.INDEX)."""
    return tuple(INDEX[n] for n in names)


def odrop_slots(ports: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, int]:
    """Each address of the host's ports (``(ifname, CIDRs)`` in host.json's order) -> its
    port's output-drop slot in the counter block."""
    import ipaddress

    return {str(ipaddress.ip_interface(a).ip): INDEX[port_drop(k, "odrop")]
            for k, (_ifname, addrs) in enumerate(ports) for a in addrs}


def out_sa_of(e: dict, cnt: Counting, socks: dict[str, socket.socket], c: CounterBlock,
              odrop_of: dict[str, int] | None = None) -> OutSa:
    """The transmit loop's record of one outbound SA entry of the journal: its socket (one
    per source address and encapsulation, kept in ``socks``), cipher, limits, pace and the
    counter indexes a packet on it moves -- the driver's when offloaded (``cnt``: the
    model's counting), the kernel's ESP statistics and histogram when not; ``odrop_of``:
    the output-drop slot of the port each of the host's addresses is on."""
    I = INDEX
    src = e["src"]
    encap = bool(e.get("encap"))  # NAT-T: ESP in UDP 4500 (RFC 3948), IPv4 outer only
    sock_key = src + ("/udp" if encap else "")
    sock = socks.get(sock_key)
    if sock is None:
        sock = socks[sock_key] = netio.tx_socket(src, socket.IPPROTO_UDP if encap else netio.IPPROTO_ESP)
    outer = "ipv6" if ":" in e["dst"] else "ipv4"
    off = e["offloaded"]
    if off:
        cnt = cnt
        inc_fwd, inc_own = counter_indexes(cnt.tx_forwarded), counter_indexes(cnt.tx_own)
        inc_own_step, fail = counter_indexes(cnt.tx_own_output_step), I[cnt.tx_fail]
    else:
        inc_fwd = inc_own = inc_own_step = (I["esp:sent-packets"], I[HIST_OUT + ALG_OF_CIPHER[e["cipher"]]])
        fail = I["eng:tx_sendfail"]
    suite = make_suite(e["cipher"], e["spi"], bytes.fromhex(e["enc_key"]),
                       bytes.fromhex(e["auth_key"]) if e.get("auth_key") else None, bool(e.get("esn")))
    return OutSa(
        spi=e["spi"], dst=e["dst"], src=src, outer=outer, cipher=e["cipher"],
        local=[parse_selector(t) for t in e.get("local_ts", [])],
        remote=[parse_selector(t) for t in e.get("remote_ts", [])],
        seal=netio.sealed_in_udp(suite.seal) if encap else suite.seal, sock=sock,
        addr=(e["dst"], 0, 0, 0) if outer == "ipv6" else (e["dst"], 0),
        slot=e["slot"], base=c.sa_slot(e["slot"]), path_mtu=e["path_mtu"], own_limit=e["own_limit"],
        fwd_limit=e["fwd_limit"], rate_Bps=(e.get("rate_mbit") or 0) * 125000.0, offloaded=bool(off),
        inc_own=inc_own, inc_own_step=inc_own_step, inc_fwd=inc_fwd,
        ibytes=-1 if off else I["esp:sent-bytes"], fail_idx=fail, esn=bool(e.get("esn")),
        outer_hdr=40 if outer == "ipv6" else 20,
        fixed=FRAMING[e["cipher"]].fixed + encap_header(outer, encap),
        dead=bool(e.get("expired")),
        odrop_idx=(odrop_of or {}).get(src, -1),
    )
