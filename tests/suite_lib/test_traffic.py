"""traffic: bisection logic, probe invocation through a real LocalHost, iperf3 on loopback."""

from __future__ import annotations

import os
import shutil

import pytest

from ipsec_hil.lab.remote import LocalHost
from ipsec_hil.lab.traffic.bench import BenchHost, ProbeError, bisect_largest, iperf_run


@pytest.mark.parametrize("line", [1335, 1300, 1200, 1383])
def test_bisect_finds_the_line(line):
    b = bisect_largest(lambda x: x <= line, 1200, 1500)
    assert b.largest == line
    assert b.smallest_failing == line + 1
    assert len(b.tried) <= 2 + 9  # log2(300) + the two ends


def test_bisect_ends():
    assert bisect_largest(lambda x: False, 10, 20).largest is None
    assert bisect_largest(lambda x: True, 10, 20).largest == 20
    assert bisect_largest(lambda x: True, 7, 7).largest == 7
    with pytest.raises(ValueError):
        bisect_largest(lambda x: True, 8, 7)


def test_bisect_records_every_answer_in_order():
    b = bisect_largest(lambda x: x <= 1446, 1400, 1500)
    assert b.tried[:2] == [(1400, True), (1500, False)]
    assert (1446, True) in b.tried and (1447, False) in b.tried


def test_probe_runs_through_the_host_api():
    bench = BenchHost("bench", LocalHost("bench"))
    with pytest.raises(ProbeError, match="--dst must be an IPv6 address"):
        bench.probe("pmtu", dst="192.0.2.1", size=10)
    with pytest.raises(ProbeError, match="not a module name"):
        bench.probe("pmtu; rm -rf /")


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
def test_iperf_run_on_loopback_parses_and_stops_the_server():
    port = 20000 + os.getpid() % 20000
    a = BenchHost("a", LocalHost("a"))
    r = iperf_run(a, a, "127.0.0.1", seconds=1, streams=2, port=port)
    assert r.error is None
    assert r.num_streams == 2 and r.sent_bps > 0
    check = LocalHost("x").run(f"ss -ltn 'sport = :{port}' | tail -n +2", timeout=10)
    assert check.stdout.strip() == ""  # one-off server gone


def test_sa_keys_from_the_setkey_parser():
    from ipsec_hil.lab.parsers import setkey
    from ipsec_hil.lab.traffic.bench import sa_keys

    base = dict(src="192.0.2.1", dst="192.0.2.2", satype="esp", mode="tunnel", spi=0xC1F2A3B4, reqid=1,
                state="mature", replay_bytes=4, seq=0, flags=0)
    gcm = setkey.SadEntry(**base, enc_alg="aes-gcm-16", enc_key="11" * 36)
    assert sa_keys(gcm) == ("aes-gcm-16", b"\x11" * 36, None)
    cbc = setkey.SadEntry(**base, enc_alg="aes-cbc", enc_key="22" * 32, auth_alg="hmac-sha2-256", auth_key="33" * 32)
    assert sa_keys(cbc) == ("aes-cbc-hmac-sha256", b"\x22" * 32, b"\x33" * 32)
    with pytest.raises(ProbeError, match="no decryption for des-cbc") as ei:
        sa_keys(setkey.SadEntry(**base, enc_alg="des-cbc", enc_key="44" * 8))
    assert "44" * 8 not in str(ei.value)


def test_sections_split_marker_output():
    from ipsec_hil.lab.appliance import sections
    from ipsec_hil.lab.errors import ParseError

    out = sections("@@hil sysctl\na: 1\nb: 2\n@@hil sysctl-stderr 1\nsysctl: unknown oid 'c'\n@@hil end\n")
    assert out == {"sysctl": "a: 1\nb: 2\n", "sysctl-stderr.arg": "1",
                   "sysctl-stderr": "sysctl: unknown oid 'c'\n", "end": ""}
    with pytest.raises(ParseError, match="before the first @@hil marker"):
        sections("garbage\n@@hil end\n")


class _RecordingHost:
    """A Host that records the scripts it is given and answers like a ping that cannot resolve."""

    name = "rec"

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None):
        from ipsec_hil.lab.remote import RunResult

        self.scripts.append(script)
        return RunResult("", "ping: cannot resolve x: Unknown host\n", 68, 0.0, self.name)


class _AnsweringHost(_RecordingHost):
    """A Host whose ping printed two replies and then ended with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    def run(self, script: str, *, timeout: float | None = None, stdin: bytes | None = None):
        from ipsec_hil.lab.remote import RunResult

        self.scripts.append(script)
        out = ("PING 198.51.100.65 (198.51.100.65): 56 data bytes\n"
               "64 bytes from 198.51.100.65: icmp_seq=0 ttl=64 time=0.390 ms\n"
               "64 bytes from 198.51.100.65: icmp_seq=1 ttl=64 time=0.410 ms\n")
        return RunResult(out, "", self.status, 0.0, self.name)


def test_a_ping_killed_before_its_statistics_is_the_appliance_going_away():
    """A reboot's SIGTERM can end the ping before the SSH session (CI: the silent_reboot
    cell of the health test got a ParseError instead of the test's own REBOOTED row)."""
    from ipsec_hil.lab.appliance import Appliance
    from ipsec_hil.lab.errors import ParseError, TransportError

    with pytest.raises(TransportError, match="killed by signal 15 before its statistics"):
        Appliance("a", _AnsweringHost(128 + 15), None).ping("198.51.100.65", count=5)
    with pytest.raises(ParseError, match="output ended before the statistics"):  # not killed: the parser's finding
        Appliance("a", _AnsweringHost(0), None).ping("198.51.100.65", count=5)


def _argv_of(pinger, **kw) -> list[str]:
    import shlex

    assert pinger.ping(**kw).status == 68  # the recorded answer went through the parser
    return shlex.split(pinger.host.scripts[-1])


@pytest.mark.parametrize(
    "size,family,sockbuf",
    [(8952, "ipv6", str(4 * (8952 + 48))), (8193, "ipv6", str(4 * (8193 + 48))),
     (8192, "ipv6", None), (1452, "ipv6", None), (None, "ipv6", None), (8972, "ipv4", None)],
)
def test_freebsd_ping6_gets_a_socket_buffer_above_8192_bytes(size, family, sockbuf):
    """FreeBSD's ping6 needs -b above 8,192 data bytes (the 9,000-byte paths); IPv4 never."""
    from ipsec_hil.lab.appliance import Appliance

    dst = "2001:db8:2::2" if family == "ipv6" else "203.0.113.130"
    args = _argv_of(Appliance("a", _RecordingHost(), None), dst=dst, size=size, count=2, dont_fragment=True,
                    source="2001:db8:2::1" if family == "ipv6" else None)
    assert args[0] == "ping" and args[-1] == dst
    assert ("-6" in args) == (family == "ipv6")
    if sockbuf is None:
        assert "-b" not in args
    else:
        assert args[args.index("-b") + 1] == sockbuf and int(sockbuf) > size
    if size is not None:
        assert args[args.index("-s") + 1] == str(size)
    # two echoes PING_INTERVAL (0.05 s) apart, the deadline one interval per echo plus three seconds
    assert "-D" in args and args[args.index("-i") + 1] == "0.05" and args[args.index("-t") + 1] == "3"


def test_bench_ping_speaks_iputils():
    args = _argv_of(BenchHost("b", _RecordingHost()), dst="fd00:b::1", size=8952, count=3, dont_fragment=True,
                    source="fd00:a::10", timeout=4)
    assert args == ["ping", "-6", "-c", "3", "-n", "-s", "8952", "-M", "do", "-I", "fd00:a::10", "-i", "0.05", "-w", "4",
                    "fd00:b::1"]


def test_ping6_sockbuf_rule():
    from ipsec_hil.lab.ping_argv import PING6_DEFAULT_DATA_MAX, ping6_sockbuf

    assert ping6_sockbuf(None) is None and ping6_sockbuf(PING6_DEFAULT_DATA_MAX) is None
    assert ping6_sockbuf(PING6_DEFAULT_DATA_MAX + 1) >= 2 * (PING6_DEFAULT_DATA_MAX + 1 + 48)
