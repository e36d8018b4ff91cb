"""ipsec_hil.lab.traffic.bypass_tax without a lab: the ABBA order, the restore of the "on"
state when a trial fails, the share, and a trial that could not offer its load."""

from __future__ import annotations

import json

import pytest

from ipsec_hil.lab.traffic import bypass_tax as bt


def _result(delivered: int, sent: int = 6000) -> bt.SendersResult:
    return bt.SendersResult(6000, sent, delivered, 1.0)


def test_abba_switches_twice_and_the_share_is_on_over_off():
    log: list[str] = []
    state = {"now": "on"}
    delivered = {"on": 3000, "off": 6000}

    def trial():
        log.append(state["now"])
        return _result(delivered[state["now"]])

    tax = bt.measure_bypass_tax(trial, switch_off=lambda: (log.append("switch off"), state.update(now="off")),
                                switch_on=lambda: (log.append("switch on"), state.update(now="on")))
    assert log == ["on", "switch off", "off", "off", "switch on", "on"]
    assert tax.rate("on") == 3000 and tax.rate("off") == 6000 and tax.share == 0.5
    assert "tunnel down, driver unloaded" in tax.table()


def test_a_failed_trial_in_the_off_state_still_switches_back_on():
    calls: list[str] = []

    def trial():
        if calls and calls[-1] == "off":
            raise bt.BenchShort("short")
        return _result(6000)

    with pytest.raises(bt.BenchShort):
        bt.measure_bypass_tax(trial, switch_off=lambda: calls.append("off"), switch_on=lambda: calls.append("on"))
    assert calls == ["off", "on"]


class _Run:
    def __init__(self, stdout: str) -> None:
        self.stdout, self.stderr, self.status = stdout, "", 0


class _Host:
    def __init__(self, sent: int, lost: int) -> None:
        self.sent, self.lost, self.cmds = sent, lost, []

    def run(self, cmd, timeout=None):
        self.cmds.append(cmd)
        return _Run(json.dumps({"end": {"sum": {"packets": self.sent, "lost_packets": self.lost}}}))


class _Bench:
    def __init__(self, host: _Host) -> None:
        self.host = host


class _Server:
    def iperf3_server(self, port):
        class S:
            def stop(self):
                pass
        return S()


def test_a_trial_short_of_its_load_is_the_bench_s_limit_not_a_result():
    ok = bt.udp_senders(_Bench(_Host(5500, 100)), _Server(), "2001:db8::2", pps=6000, senders=8, size=64)()
    assert (ok.sent, ok.delivered, ok.offered_pps) == (5500, 5400, 5500)
    with pytest.raises(bt.BenchShort, match="the bench could not offer 6,000 datagrams/s .* wrote 5,300 of 6,000"):
        bt.udp_senders(_Bench(_Host(5300, 0)), _Server(), "2001:db8::2", pps=6000, senders=8, size=64)()


def test_senders_argv_splits_the_rate_over_the_streams():
    cmd = bt.senders_argv("192.0.2.2", pps=8000, senders=8, size=64, seconds=1, bind=None, port=5201)
    assert cmd[cmd.index("-P") + 1] == 8 and cmd[cmd.index("-b") + 1] == "0.5120M"
