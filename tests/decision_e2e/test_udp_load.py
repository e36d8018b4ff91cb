"""ipsec_hil.lab.traffic.udp_load without a lab: iperf3's real UDP JSON on loopback, and its errors."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ipsec_hil.lab.decision.search import OFFER_TOLERANCE
from ipsec_hil.lab.remote import argv
from ipsec_hil.lab.traffic.udp_load import (PORT_TX_BEFORE, PORT_TX_AFTER, LoadError, blocks_for, client_argv,
                                           parse_udp_json, split_port_tx, trial_script)


def test_blocks_make_fractional_durations():
    assert blocks_for(96.0, 0.25, 1200) == 2500  # 96 Mbit/s x 0.25 s / 9600 bits
    assert blocks_for(0.001, 0.01, 1200) == 1
    assert client_argv("10.0.0.1", 50, blocks=10, size=1200, bind="10.0.0.2", port=5300)[-4:] == ["-k", 10, "-B",
                                                                                                  "10.0.0.2"]


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
def test_a_real_iperf3_udp_trial_on_loopback():
    port = 5390 + int(time.time()) % 50
    srv = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while True:
            out = subprocess.run(client_argv_str(port), capture_output=True, text=True, timeout=30)
            if "unable to connect" not in out.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        srv.wait(timeout=10)
    r = parse_udp_json(out.stdout, 20.0, 0.2)
    assert r.sent == blocks_for(20.0, 0.2, 1200) and r.received <= r.sent and r.duration == 0.2


def client_argv_str(port: int) -> list[str]:
    return [str(a) for a in client_argv("127.0.0.1", 20.0, blocks=blocks_for(20.0, 0.2, 1200), size=1200, bind=None,
                                        port=port)]


def test_errors_name_what_is_missing():
    with pytest.raises(LoadError, match="no JSON"):
        parse_udp_json("iperf3: error - unable to connect", 1, 1)
    with pytest.raises(LoadError, match="unable to connect"):
        parse_udp_json(json.dumps({"error": "unable to connect to server"}), 1, 1)
    with pytest.raises(LoadError, match="without packets"):
        parse_udp_json(json.dumps({"end": {"sum_sent": {"bytes": 1}}}), 1, 1)
    lossy = {"end": {"sum_sent": {"packets": 100}, "sum_received": {"packets": 100, "lost_packets": 7}}}
    assert parse_udp_json(json.dumps(lossy), 5.0, 1.0).received == 93


class _Outputs:
    """A bench whose iperf3 prints the given outputs in turn, and a server that counts starts."""

    def __init__(self, *outputs: str) -> None:
        self.outputs, self.runs, self.servers = list(outputs), 0, 0
        self.host = self

    def run(self, cmd: str, timeout: float):
        from types import SimpleNamespace

        self.runs += 1
        return SimpleNamespace(stdout=self.outputs.pop(0), status=0, stderr="")

    def iperf3_server(self, port: int):
        self.servers += 1
        return self

    def stop(self) -> None:
        pass


LOST_HANDSHAKE = json.dumps({"error": "unable to read from stream socket: Resource temporarily unavailable"})
GOOD = json.dumps({"end": {"sum_sent": {"packets": 50}, "sum_received": {"packets": 50, "lost_packets": 1}}})


def test_a_trial_whose_handshake_was_lost_starts_again():
    from ipsec_hil.lab.traffic.udp_load import HANDSHAKE_ATTEMPTS, udp_trial

    io = _Outputs(LOST_HANDSHAKE, GOOD)
    r = udp_trial(io, io, "10.0.0.1")(5.0, 0.1)
    assert (r.sent, r.received, io.runs, io.servers) == (50, 49, 2, 2), "a new server and client for the new start"
    io = _Outputs(*[LOST_HANDSHAKE] * HANDSHAKE_ATTEMPTS)
    with pytest.raises(LoadError, match="stream socket"):
        udp_trial(io, io, "10.0.0.1")(5.0, 0.1)
    assert io.runs == HANDSHAKE_ATTEMPTS
    io = _Outputs(json.dumps({"error": "unable to connect to server"}), GOOD)
    with pytest.raises(LoadError, match="unable to connect"):
        udp_trial(io, io, "10.0.0.1")(5.0, 0.1)
    assert io.runs == 1, "only a lost handshake is started again"


# ---------------------------------------------------------------- issue 41: what a trial offered

GOLDEN_UDP = Path(__file__).parent / "golden_udp"


@pytest.mark.parametrize("case", sorted(p.stem for p in GOLDEN_UDP.glob("*.txt")))
def test_golden_trials_parse_to_what_left_the_bench(case):
    args = json.loads((GOLDEN_UDP / f"{case}.args.json").read_text())
    text, port_tx = split_port_tx((GOLDEN_UDP / f"{case}.txt").read_text())
    got = dataclasses.asdict(parse_udp_json(text, args["load_mbit"], args["duration"], port_tx))
    assert got == pytest.approx(json.loads((GOLDEN_UDP / f"{case}.json").read_text()))


def test_the_golden_cases_say_what_the_search_needs():
    """A bench at its limit and a bench whose own queue dropped are short of the load asked
    (by far more than the search's 2 %); the path's loss is loss, not a short offer."""
    def parse(case):
        args = json.loads((GOLDEN_UDP / f"{case}.args.json").read_text())
        text, tx = _text_and_tx(case)
        return parse_udp_json(text, args["load_mbit"], args["duration"], tx)

    limited, drops, lossy, clean = (parse(c) for c in ("bench-limited", "bench-queue-drops", "path-loss", "clean"))
    assert limited.shortfall() > 0.1 and limited.loss_ratio == 0  # 96.8 of 110 left, nothing lost
    assert drops.shortfall() > 0.7 and drops.port_tx < drops.sent  # the bench's qdisc ate them
    assert lossy.shortfall() < OFFER_TOLERANCE and 0.01 < lossy.loss_ratio < 0.03
    assert clean.shortfall() < OFFER_TOLERANCE and clean.loss_ratio == 0


def _text_and_tx(case):
    text, tx = split_port_tx((GOLDEN_UDP / f"{case}.txt").read_text())
    return text, tx


def test_the_trial_script_reads_the_port_around_the_client_only_when_named():
    cmd = client_argv("10.0.0.1", 50, blocks=10, size=1200, bind=None, port=5300)
    assert trial_script(cmd, None) == argv(*cmd)
    script = trial_script(cmd, "a_lan").splitlines()
    assert script[1] == argv(*cmd) and "/sys/class/net/a_lan/statistics/tx_packets" in script[0]
    assert script[0].startswith(f"echo {PORT_TX_BEFORE} ") and script[2].startswith(f"echo {PORT_TX_AFTER} ")
    assert split_port_tx(f"{PORT_TX_BEFORE} 10\n{{}}\n{PORT_TX_AFTER} \n") == ("{}", None)  # unreadable after


def test_bad_sender_figures_are_an_error_naming_them():
    bad_seconds = {"end": {"sum_sent": {"packets": 10, "bytes": 12000, "seconds": 0},
                           "sum_received": {"packets": 10, "lost_packets": 0}}}
    with pytest.raises(LoadError, match=r"end.sum_sent: seconds 0"):
        parse_udp_json(json.dumps(bad_seconds), 5.0, 1.0)
