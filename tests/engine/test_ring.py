"""esp0's ring (ipsec_hil_twin.engine.netio.ring_packets): the stated queue, not Linux's 1,000
packets, is what the paced engine may hold in front of itself (issue 41)."""

from ipsec_hil_twin.engine.netio import RING_DEFAULT, RING_MIN, ring_packets


def test_the_ring_holds_the_smallest_stated_queue_in_full_size_frames():
    assert ring_packets([128 * 1024]) == 87  # 128 KiB: ~107 kB of 1,228-byte packets, not ~1.2 MB
    assert ring_packets([128 * 1024, 64 * 1024, None]) == 43
    assert ring_packets([1500]) == RING_MIN  # a scheduling hiccup must not drop a burst
    assert ring_packets([None]) == ring_packets([]) == RING_DEFAULT  # nothing stated: Linux's default
