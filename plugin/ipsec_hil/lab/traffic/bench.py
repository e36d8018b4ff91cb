"""Traffic: iperf3 runs, pings, bisection and the bench's scapy probes.

Why: the pages' figures are iperf3 streams and pings between the bench, the appliances
and their peers; the same calls must drive a real bench PC (over SSH) and the virtual
lab's bench (a LocalHost in its namespace), so everything goes through the Host API.

- :class:`BenchHost` -- the bench PC: Linux (iputils ping, iperf3, python with scapy);
- :func:`iperf_run` -- one-off server on one side, ``--json`` client on the other;
- :func:`ping_many`, :func:`bisect_largest` -- sizes and boundaries;
- :meth:`BenchHost.probe` -- ``python -m ipsec_hil.lab.probes.<name>`` and its JSON.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ipsec_hil.lab import ping_argv
from ipsec_hil.lab.appliance import IperfServer, ShellCommands
from ipsec_hil.lab.errors import LabError
from ipsec_hil.lab.measuring.quiet import load_ended
from ipsec_hil.lab.remote import argv
from ipsec_hil.lab.timeshare import PROBES, STREAM, TRAFFIC, spent

log = logging.getLogger(__name__)

#: The directory holding the ipsec_hil package, where ``python -m ipsec_hil.lab.probes.X`` runs
#: (``plugin/`` in a checkout, site-packages when installed).
SOURCE_ROOT = Path(__file__).resolve().parents[2]


class ProbeError(LabError):
    """A bench probe failed or printed something that is not its JSON."""


class BenchHost(ShellCommands):
    """The bench PC (Linux): ping with iputils' flags, iperf3, and the scapy probes.

    ``python`` and ``repo`` are where the probes live on the bench (the virtual lab's bench
    is this machine: this interpreter and this checkout).
    """

    def __init__(
        self,
        name: str,
        host: Any,
        python: str = sys.executable,
        repo: str | os.PathLike[str] = SOURCE_ROOT,
        command_timeout: float = 60.0,
    ) -> None:
        self.name = name
        self.host = host
        self.python = python
        self.repo = str(repo)
        self.command_timeout = command_timeout

    def __repr__(self) -> str:
        return f"BenchHost({self.name!r})"

    def ping_argv(self, req: ping_argv.PingRequest) -> list[str | int]:
        """iputils' ping (``-M do`` for don't-fragment, ``-w`` deadline)."""
        return ping_argv.iputils(req)

    @spent(PROBES)
    def probe(self, name: str, run_timeout: float = 120.0, **args: Any) -> dict:
        """Run ``python -m ipsec_hil.lab.probes.<name> --key value ...`` on the bench; its JSON.

        Keyword ``foo_bar=v`` becomes ``--foo-bar v``; ``True`` a bare flag; ``None`` omitted.
        ``run_timeout`` bounds the whole process (``timeout=`` is the probe's own option).
        Its time is the run's "probes" share (ipsec_hil.lab.timeshare).
        """
        if not name.isidentifier():
            raise ProbeError(f"probe name {name!r} is not a module name")
        cmd: list[str] = [self.python, "-m", f"ipsec_hil.lab.probes.{name}"]
        for k, v in args.items():
            if v is None or v is False:
                continue
            flag = "--" + k.replace("_", "-")
            cmd += [flag] if v is True else [flag, str(v)]
        s = f"cd {shlex.quote(self.repo)} || exit 70\nexec {argv(*cmd)}"
        r = self._run(s, timeout=run_timeout)
        return parse_probe_output(name, r.stdout, r.stderr, r.status)


    def esp_decrypt(self, pcap: str, spi: int | str, cipher: str, enc_key: bytes, auth_key: bytes | None = None,
                    timeout: float = 300.0) -> dict:
        """Decrypt ``pcap`` (on the bench) for one SPI with the given keys via the esp_decrypt probe.

        The keys go into a 0600 file on the bench (never argv, never a log) that is removed
        afterwards whatever happens.
        """
        spi_hex = spi if isinstance(spi, str) else f"0x{spi:08x}"
        sa = {"cipher": cipher, "enc_key": enc_key.hex(), "auth_key": auth_key.hex() if auth_key else None}
        path = f"/tmp/.hil-sa-{os.getpid()}-{os.urandom(4).hex()}.json"
        self.host.write_file_atomic(path, json.dumps(sa).encode(), mode=0o600)
        try:
            return self.probe("esp_decrypt", run_timeout=timeout, pcap=pcap, spi=spi_hex, sa_file=path)
        finally:
            self.host.remove(path)


    def esp_decrypt_sa(self, pcap: str, sa: Any, timeout: float = 300.0) -> dict:
        """:meth:`esp_decrypt` with the keys of one ``setkey -D`` entry (parsers.setkey SadEntry)."""
        cipher, enc, auth = sa_keys(sa)
        return self.esp_decrypt(pcap, int(sa.spi), cipher, enc, auth, timeout=timeout)


def sa_keys(sa: Any) -> tuple[str, bytes, bytes | None]:
    """(cipher, enc_key, auth_key) of a setkey entry in the suite's cipher names.

    GCM's key as setkey prints it includes the 4-byte salt (RFC 4106), as the probe wants.
    """
    enc_alg = (getattr(sa, "enc_alg", None) or "").lower()
    auth_alg = (getattr(sa, "auth_alg", None) or "").lower()
    if enc_alg == "aes-gcm-16":
        cipher = "aes-gcm-16"
    elif enc_alg in ("aes-cbc", "rijndael-cbc") and auth_alg == "hmac-sha2-256":
        cipher = "aes-cbc-hmac-sha256"
    else:
        raise ProbeError(f"SA spi 0x{int(sa.spi):08x}: no decryption for {enc_alg or '?'} / {auth_alg or 'no auth'}")
    if not sa.enc_key:
        raise ProbeError(f"SA spi 0x{int(sa.spi):08x}: setkey showed no encryption key")
    enc = bytes.fromhex(sa.enc_key)
    auth = bytes.fromhex(sa.auth_key) if cipher != "aes-gcm-16" and sa.auth_key else None
    return cipher, enc, auth


#: the brief's name for the bench side
Bench = BenchHost


def parse_probe_output(name: str, stdout: str, stderr: str, status: int) -> dict:
    """The probe's last stdout line as JSON; ProbeError carrying its error otherwise."""
    lines = [l for l in stdout.splitlines() if l.strip()]
    if not lines:
        raise ProbeError(f"probe {name}: no output (status {status}); stderr: {stderr.strip()[-300:]}")
    try:
        obj = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ProbeError(f"probe {name}: last line is not JSON: {lines[-1][:200]!r} (status {status})") from None
    if not isinstance(obj, dict):
        raise ProbeError(f"probe {name}: expected a JSON object, got {type(obj).__name__}")
    if status != 0 or "error" in obj:
        raise ProbeError(f"probe {name} failed (status {status}): {obj.get('error', '?')}")
    return obj


# --------------------------------------------------------------------------- iperf3


def iperf_run(
    client: ShellCommands,
    server: ShellCommands,
    server_addr: str,
    seconds: float = 10,
    streams: int = 1,
    reverse: bool = False,
    port: int = 5201,
    bind: str | None = None,
    server_bind: str | None = None,
) -> Any:
    """One iperf3 measurement: a one-off server on ``server``, ``--json`` client on ``client``.

    ``server_addr`` is the address the client connects to (the far side of the tunnel);
    ``bind`` the client's source address (``-B``, e.g. to be inside a child's selectors).
    Returns parsers.iperf3's IperfResult; the server is stopped whatever happens.

    In the run's breakdown (ipsec_hil.lab.timeshare) the ``seconds`` asked are "traffic" and
    everything else -- the server's start and stop, the client's connecting and final
    exchange -- is "stream start/stop".
    """
    with spent(STREAM):
        srv: IperfServer = server.iperf3_server(port=port, bind=server_bind)
        try:
            with spent(TRAFFIC, cap=seconds):
                return client.iperf3_client(
                    server_addr, port=port, seconds=seconds, streams=streams, reverse=reverse, bind=bind
                )
        finally:
            load_ended()  # a settle right after keeps the load's tail (ipsec_hil.lab.measuring.quiet)
            srv.stop()


# --------------------------------------------------------------------------- pings, bisection


def ping_many(pinger: ShellCommands, dst: str, sizes: Iterable[int], count: int = 3, **kw: Any) -> dict[int, Any]:
    """Ping ``dst`` once per size (``count`` echoes each); {size: PingResult}."""
    return {int(s): pinger.ping(dst, size=int(s), count=count, **kw) for s in sizes}


@dataclass
class Bisection:
    """Largest passing value and every probe made (the page's "1,335 pass, 1,336 not")."""

    largest: int | None
    tried: list[tuple[int, bool]] = field(default_factory=list)

    @property
    def smallest_failing(self) -> int | None:
        fails = [x for x, ok in self.tried if not ok and (self.largest is None or x > self.largest)]
        return min(fails) if fails else None


def bisect_largest(send_fn: Callable[[int], bool], lo: int, hi: int) -> Bisection:
    """Largest x in [lo, hi] with ``send_fn(x)`` true, assuming pass-then-fail monotonicity.

    ``lo`` and ``hi`` are both tried first: ``largest`` is None when even ``lo`` fails and
    ``hi`` when it passes. Bisection only probes between the largest pass and the smallest
    fail, so it cannot see a non-monotone line by itself: ``tried`` records every answer for
    the page, and a test that doubts monotonicity re-probes around the result.
    """
    if lo > hi:
        raise ValueError(f"bisect_largest: lo {lo} > hi {hi}")
    tried: list[tuple[int, bool]] = []

    def probe(x: int) -> bool:
        ok = bool(send_fn(x))
        tried.append((x, ok))
        return ok

    if not probe(lo):
        return Bisection(None, tried)
    if lo == hi or probe(hi):
        return Bisection(hi, tried)
    good, bad = lo, hi
    while bad - good > 1:
        mid = (good + bad) // 2
        if probe(mid):
            good = mid
        else:
            bad = mid
    return Bisection(good, tried)
