"""Lifetime arithmetic and its listing, without sockets: strongSwan's defaults and jitter
(vici_config.c check_lifetimes, child_cfg.c apply_jitter, peer_cfg.c get_rekey_time) and
how list_sas.c prints the times."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from ipsec_hil.lab.parsers import swanctl_list_sas
from ipsec_hil_twin.ike.conf import load
from ipsec_hil_twin.ike.lifetimes import child_rekey_after, ike_rekey_after
from ipsec_hil_twin.ike.pairlab import conf
from ipsec_hil_twin.ike.swanctl import format_list_sas, vici_raw, vici_sa


@pytest.mark.parametrize("options, want", [
    ({}, (3600, 3960, 360)),
    ({"rekey_time": "10s"}, (10, 11, 1)),
    ({"rekey_time": "1h", "life_time": "2h"}, (3600, 7200, 3600)),
    ({"rekey_time": "0"}, (0, 0, 0)),
    ({"rekey_time": "0", "life_time": "5s"}, (0, 5, 5)),
    ({"rekey_time": "20s", "rand_time": "3s"}, (20, 22, 3)),
])
def test_child_lifetime_defaults_follow_check_lifetimes(tmp_path, options, want):
    path = tmp_path / "swanctl.conf"
    path.write_text(conf("lab", "192.0.2.1", "192.0.2.2", {"net": ("10.1.0.0/24", "10.2.0.0/24")},
                         child_options=options))
    (c,) = load(str(path)).connections
    net = c.children["net"]
    assert (net.rekey_time, net.life_time, net.rand_time) == want


def test_bad_rand_time_names_the_field(tmp_path):
    path = tmp_path / "swanctl.conf"
    path.write_text(conf("lab", "192.0.2.1", "192.0.2.2", {"net": ("10.1.0.0/24", "10.2.0.0/24")},
                         child_options={"rand_time": "soon"}))
    (err,) = load(str(path)).errors
    assert err.why == "invalid value for: rand_time" and err.where.endswith(":22"), err  # the rand_time line


def test_child_jitter_stays_within_rand_time():
    rng = random.Random(7)
    seen = {child_rekey_after(100, 10, rng) for _ in range(2000)}
    assert min(seen) >= 89 and max(seen) <= 100 and len(seen) >= 10
    assert child_rekey_after(100, 0, rng) == 100 and child_rekey_after(0, 0, rng) == 0


def test_no_rekey_with_a_rand_time_lists_a_past_time_as_5_9_8():
    """rekey_time = 0 with life_time set (rand_time defaults to life_time): real 5.9.8
    printed `installed 0s ago, rekeying in -3s, expires in 5s` -- apply_jitter's 0 - jitter
    wraps in a uint64 -- and never rekeyed; with rand_time = 0 no time is printed."""
    rng = random.Random(11)
    seen = {child_rekey_after(0, 5, rng) for _ in range(500)}
    assert seen == {0, -1, -2, -3, -4, -5}


def test_ike_jitter_defaults_to_a_tenth():
    rng = random.Random(3)
    seen = {ike_rekey_after(14400, None, rng) for _ in range(2000)}
    assert 14400 - 1440 < min(seen) and max(seen) <= 14400
    assert ike_rekey_after(600, 0, rng) == 600 and ike_rekey_after(0, None, rng) == 0


def _sa(**child_times) -> dict:
    child = {"name": "net", "uniqueid": 3, "reqid": 1, "state": "INSTALLED", "mode": "TUNNEL", "protocol": "ESP",
             "encr_alg": "AES_GCM_16", "encr_keysize": 256, "integ_alg": None, "listing": "AES_GCM_16-256",
             "spi_in": "c0000001", "spi_out": "c0000002", "bytes_in": 0, "packets_in": 0, "use_in": None,
             "bytes_out": 0, "packets_out": 0, "use_out": None, "install_time": 4, "local_ts": ["10.1.0.0/24"],
             "remote_ts": ["10.2.0.0/24"], **child_times}
    return {"name": "lab", "uniqueid": 1, "version": 2, "state": "ESTABLISHED", "local_host": "192.0.2.1",
            "local_port": 500, "local_id": "192.0.2.1", "remote_host": "192.0.2.2", "remote_port": 500,
            "remote_id": "192.0.2.2", "initiator": True, "initiator_spi": "0123456789abcdef",
            "responder_spi": "fedcba9876543210", "encr_alg": "AES_GCM_16", "encr_keysize": 256,
            "integ_alg": None, "prf_alg": "PRF_HMAC_SHA2_256", "dh_group": "CURVE_25519",
            "listing": "AES_GCM_16-256/PRF_HMAC_SHA2_256/CURVE_25519", "established": 9, "rekey_time": 13000,
            "tasks_active": ["CHILD_REKEY"], "children": [child]}


def test_times_printed_only_when_set_as_list_sas_c():
    both = format_list_sas([_sa(rekey_time=50, life_time=70)])
    assert "\n    installed 4s ago, rekeying in 50s, expires in 70s\n" in both
    assert "\n  established 9s ago, rekeying in 13000s\n  active:  CHILD_REKEY\n" in both
    life_only = format_list_sas([_sa(rekey_time=None, life_time=70)])
    assert "\n    installed 4s ago, expires in 70s\n" in life_only
    neither = format_list_sas([_sa(rekey_time=None, life_time=None)])
    assert "\n    installed 4s ago\n" in neither
    for text in (both, life_only, neither):
        (ike,) = swanctl_list_sas.parse(text).ike_sas
        assert ike.tasks_active == ("CHILD_REKEY",)
    (ike,) = swanctl_list_sas.parse(both).ike_sas
    assert (ike.children[0].rekey_in, ike.children[0].expires_in) == (50, 70)
    body = vici_sa(_sa(rekey_time=None, life_time=70))["lab"]
    kid = body["child-sas"]["net-3"]
    assert "rekey-time" not in kid and kid["life-time"] == 70 and body["tasks-active"] == ["CHILD_REKEY"]


def test_a_past_rekey_time_prints_negative_as_5_9_8():
    """vici_query.c adds rekey-time as (int64)(t - now): once an automatic rekey has
    fired, the old (REKEYED/DELETED) child prints a negative value."""
    text = format_list_sas([_sa(state="DELETED", rekey_time=-2, life_time=5)])
    assert "\n    installed 4s ago, rekeying in -2s, expires in 5s\n" in text


def test_rekeyed_child_listing_matches_real_5_9_8():
    """list_sas_rekeyed_sample.txt is real 5.9.8 (Debian charon, kernel-libipsec, hence
    TUNNEL-in-UDP and port 4500) two seconds after an automatic rekey with rekey_time = 6s,
    rand_time = 0, life_time = 40s: the old child DELETED, its rekey time in the past."""
    sample = (Path(__file__).parent / "list_sas_rekeyed_sample.txt").read_text()
    sa = _sa(state="DELETED", install_time=8, rekey_time=-2, life_time=32, spi_in="06032ffa", spi_out="8d337231",
             uniqueid=1, local_ts=["10.1.0.0/24"], remote_ts=["10.2.0.0/24"])
    new = dict(sa["children"][0], state="INSTALLED", uniqueid=2, install_time=2, rekey_time=4, life_time=38,
               spi_in="9a3700cf", spi_out="1822a870")
    sa.update(local_port=4500, remote_port=4500, initiator_spi="c1e531540973982e",
              responder_spi="e92cd353567b54f6", established=8, rekey_time=13373, tasks_active=[],
              children=[sa["children"][0], new])
    assert format_list_sas([sa]) == sample.replace("TUNNEL-in-UDP", "TUNNEL")


def test_rekeyed_child_raw_listing_matches_real_5_9_8():
    """list_sas_rekeyed_raw_sample.txt: real 5.9.8 `--list-sas --raw` one second after an
    automatic rekey (rekey_time = 6s, rand_time = 0, life_time = 40s; UDP-encapsulated by
    kernel-libipsec, hence encap=yes): vici sends the past rekey time as `rekey-time=-1`."""
    sample = (Path(__file__).parent / "list_sas_rekeyed_raw_sample.txt").read_text()
    real_child = re.search(r"net-1 \{[^}]*\}", sample)[0].replace(" encap=yes", "")
    sa = _sa(state="DELETED", install_time=7, rekey_time=-1, life_time=33, spi_in="187a0bbd", spi_out="a0ee110d",
             uniqueid=1, local_ts=["10.1.0.0/24"], remote_ts=["10.2.0.0/24"])
    twin = re.search(r"net-1 \{[^}]*\}", vici_raw(vici_sa(sa)))[0]
    assert twin == real_child


def test_timers_act_through_the_part_they_are_given_not_a_daemon(tmp_path):
    """Lifetimes is built on the shared state alone (ipsec_hil_twin.ike.state) and acts
    through the Expiry it is handed: a timer firing before that says so, and the daemon
    hands it its rekey part (the parts no longer reach each other through the daemon)."""
    from types import SimpleNamespace

    from ipsec_hil_twin.ike.daemon import Daemon
    from ipsec_hil_twin.ike.lifetimes import Lifetimes
    from ipsec_hil_twin.ike.state import IkeState

    lifetimes = Lifetimes(IkeState(tmp_path))
    with pytest.raises(RuntimeError, match="before act_with"):
        lifetimes._soft(SimpleNamespace(state="INSTALLED"))
    d = Daemon(tmp_path)
    assert d.lifetimes.rekeys is d.rekeys and d.children.lifetimes is d.lifetimes
    assert d.initiator.transport is d.transport is d.rekeys.transport
    assert d.state.sas is d.sas and d.responder.state is d.state
