"""Link down/up on the appliance's outer port: the tunnel resumes through the offload engine.

Issue 42: users of offload keep reporting associations lost when a port goes down
(strongSwan's packet-offload work notes that offloaded states and policies vanish with the
interface). While the peer's pings stream through the tunnel, the appliance's outer port
is taken down and up over its own shell (``ifconfig IF down``, ``ifconfig IF up``). Then:
the stream stopped while the port was down (the flap really happened); traffic resumes
within RESUME_S; it is carried by the offload engine again (the driver's counters move,
the kernel's ESP counters do not); the associations are the ones strongSwan believes in
(setkey -D and the engine hold exactly the SPIs swanctl --list-sas shows, two per child);
nothing is left behind (no association beyond those).
"""

from __future__ import annotations

import threading
import time

import pytest

from ipsec_hil.lab.measuring.measure import expect_at_least

pytestmark = [pytest.mark.tunnels(outer="ipv4", inner="ipv4", cipher="aes-gcm-16", children="one")]

STREAM_PINGS, STREAM_INTERVAL = 100, 0.05
"""The stream: the peer's pings through the tunnel, 5 s of them, the port flapped inside."""
FLAP_AFTER_S = 2.0
"""When the port goes down after the stream's ping was started: its SSH session may take a
second or more to start the program on a loaded machine, the flap must fall inside."""
DOWN_S = 1.0
"""How long the port stays down: 20 of the stream's echoes fall into it."""
RESUME_S = 10.0
"""The longest the tunnel may take to carry traffic again after ``ifconfig IF up``: a port
renegotiates its link in a second or two on hardware; the associations must not need
IKE to be redone (strongSwan's DPD would take far longer)."""
CHECK_PINGS = 10


def _ifname(tunnel, end: str) -> str:
    e = tunnel.end(end)
    port = tunnel.topology.port(e.host, e.port)
    return getattr(port, "ifname", None) or e.port


def _first_answer_after(peer, dst: str, src: str, bound: float) -> float | None:
    """Seconds until a single echo is answered (tried every 0.2 s), None past ``bound``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound:
        r = peer.ping(dst, count=1, source=src, timeout=2)
        if r.received:
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def test_link_down_up_resumes_through_the_engine(tunnel, record, meter):
    """Outer port down and up under a stream: traffic resumes through the offload engine,
    on the associations strongSwan lists, nothing left behind."""
    app, peer = tunnel.local, tunnel.remote
    ifname = _ifname(tunnel, "local")
    dst, src = tunnel.inner_address("local"), tunnel.inner_address("remote")
    stream: dict = {}
    offloading = [tunnel.appliance(e) for e in ("local", "remote") if tunnel.offloaded(e)]
    held_before = {a.name: a.snapshot().counters["sa_count"] for a in offloading}

    def run_stream() -> None:
        try:
            stream["result"] = peer.ping(dst, count=STREAM_PINGS, interval=STREAM_INTERVAL, source=src,
                                         timeout=STREAM_PINGS * STREAM_INTERVAL + 10)
        except Exception as exc:  # noqa: BLE001 -- said below, with what the flap did
            stream["error"] = exc

    t = threading.Thread(target=run_stream, name="hil-link-flap-stream")
    t.start()
    try:
        time.sleep(FLAP_AFTER_S)
        app.ifconfig(ifname, "down")
        time.sleep(DOWN_S)
    finally:
        app.ifconfig(ifname, "up")  # never leave the port down
        up_at = time.monotonic()
        t.join()
    record.traffic_seconds += STREAM_PINGS * STREAM_INTERVAL
    assert "error" not in stream, f"{peer.name}: the stream's pings failed: {stream.get('error')}"
    r = stream["result"]
    record.figure(f"stream echoes answered across {ifname} down {DOWN_S:g} s / up", f"{r.received} of {r.transmitted}")
    # the stream stopped while the port was down: its echoes then were lost, or held in a queue
    # until the port came up (answered a whole down time late: the twin's engines queue them)
    lost_min = int(DOWN_S / STREAM_INTERVAL / 2)
    lost, late_ms = r.transmitted - r.received, r.rtt_max or 0.0
    record.figure("stream echoes lost / the latest answer's round trip, ms", f"{lost} / {late_ms:g}")
    assert lost >= lost_min or late_ms >= 800 * DOWN_S, (
        f"{app.name}: {ifname} was down {DOWN_S:g} s under a stream of one echo per {STREAM_INTERVAL:g} s, yet "
        f"{lost} of {r.transmitted} went unanswered (expected at least {lost_min}) and the slowest answer took "
        f"{late_ms:g} ms: the port did not go down")

    waited = _first_answer_after(peer, dst, src, RESUME_S)
    record.figure(f"traffic resumed after {ifname} up, s",
                  "never" if waited is None else round(time.monotonic() - up_at, 2))
    assert waited is not None, (
        f"{peer.name} -> {app.name}: no echo answered within {RESUME_S:g} s of `ifconfig {ifname} up`")

    with meter(app, peer, title=f"{CHECK_PINGS} pings after the flap") as m:
        c = peer.ping(dst, count=CHECK_PINGS, source=src)
    assert c.received == CHECK_PINGS, f"after the flap {c.received} of {c.transmitted} echoes answered"
    expect_at_least(m.ledger.value(tunnel.decrypted_refs("local")), CHECK_PINGS,
                    "after the flap the appliance's engine decrypted every echo", ledger=m.ledger)
    expect_at_least(m.ledger.value(tunnel.encrypted_refs("local")), CHECK_PINGS,
                    "after the flap the appliance's engine encrypted every reply", ledger=m.ledger)
    tunnel.expect_offload_carried(m.ledger, f"the pings after {ifname} went down and up")

    kids = len(tunnel.children)
    for end in ("local", "remote"):
        a = tunnel.appliance(end)
        believed = set(tunnel.spis(a))  # swanctl --list-sas: the SPIs strongSwan installed
        keyed = {sa.spi for sa in a.setkey_sas().entries if sa.spi in believed}
        record.figure(f"{a.name}: associations of {tunnel.conn} after the flap (setkey -D)", len(keyed))
        assert len(believed) == 2 * kids and keyed == believed, (
            f"{a.name}: after the flap strongSwan lists SPIs {sorted(f'{s:08x}' for s in believed)}, the kernel "
            f"holds {sorted(f'{s:08x}' for s in keyed)} of them (expected {2 * kids}: two per child)")
    for a in offloading:  # the engine's count, which other configurations' tunnels share: unchanged
        held = a.snapshot().counters["sa_count"]
        record.figure(f"{a.name}: associations in the engine before / after the flap", f"{held_before[a.name]} / {held}")
        assert held == held_before[a.name], (
            f"{a.name}: the engine held {held_before[a.name]} associations before the flap and {held} after: "
            f"associations {'lost' if held < held_before[a.name] else 'left behind'} with the port")
