"""The injection's two programs (ipsec_hil.lab.inject.scripts SENDER, RECEIVER) run for real on
loopback.

Why: they are text shipped to lab hosts and run there, so nothing else executes them
before a lab does; a syntax slip or a changed JSON key would surface only as a failed
acceptance test. The sender needs root (a raw IPPROTO_ESP socket)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import socket
import sys
import threading
import time

import pytest

from ipsec_hil.lab.inject.scripts import RECEIVER, SENDER


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a raw ESP socket)")
def test_sender_sends_every_frame_and_reports_its_queue_waits():
    frames = [bytes(8) + bytes([i]) * (20 + i) for i in range(5)]  # SPI 0: the loopback stack drops them
    blob = b"".join(struct.pack("!H", len(f)) + f for f in frames)
    out = subprocess.run([sys.executable, "-c", SENDER, "127.0.0.1", "-", "2000"], input=blob,
                         capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr.decode()[-500:]
    got = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert (got["sent"], got["failed"], got["errors"]) == (5, 0, {})
    assert got["queue_full"] == 0 and got["seconds"] >= 4 / 2000


def _frames_blob(n: int, first: int = 0, spi: bytes = bytes(4)) -> bytes:
    """``n`` frames of SPI ``spi`` (unknown: the loopback stack drops them), the last byte tagging each."""
    return b"".join(struct.pack("!H", 28) + spi + bytes(4) + bytes([(first + i) % 256]) * 20 for i in range(n))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a raw ESP socket)")
def test_sender_reads_frames_as_they_come_and_never_bursts_after_a_stall():
    """Half the frames, a stall (the rest still on its way), the other half: the second
    half leaves paced from the stall's end (100 frames at 1,000/s span >= 99 ms on the
    wire), not at once to catch up with a schedule that ran on during the stall."""
    spi = os.urandom(4)
    rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, 50)  # a copy of every ESP packet to this host
    rx.settimeout(5)
    seen: list[tuple[float, int]] = []

    def listen() -> None:
        while len(seen) < 200:
            try:
                data = rx.recv(2048)
            except OSError:
                return
            if data[20:24] == spi:  # not another test's frames
                seen.append((time.monotonic(), data[-1]))

    t = threading.Thread(target=listen)
    t.start()
    proc = subprocess.Popen([sys.executable, "-c", SENDER, "127.0.0.1", "-", "1000"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(_frames_blob(100, 0, spi))
        proc.stdin.flush()
        time.sleep(1.0)
        out, err = proc.communicate(_frames_blob(100, 100, spi), timeout=30)
    finally:
        t.join(10)
        rx.close()
    assert proc.returncode == 0, err.decode()[-500:]
    got = json.loads(out.decode().strip().splitlines()[-1])
    assert (got["sent"], got["failed"], got["cut"]) == (200, 0, 0)
    second = [at for at, tag in seen if tag >= 100]
    assert len(second) == 100, f"{len(seen)} frames seen on loopback"
    assert second[-1] - second[0] >= 0.099 - 0.005, f"the second half left within {second[-1] - second[0]:.3f} s"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a raw ESP socket)")
@pytest.mark.parametrize("cut_at", [-5, -29])  # inside the third frame, inside its length
def test_sender_says_when_its_stdin_ends_inside_a_frame(cut_at):
    blob = _frames_blob(3)[:cut_at]
    out = subprocess.run([sys.executable, "-c", SENDER, "127.0.0.1", "-", "2000"], input=blob,
                         capture_output=True, timeout=30)
    got = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert (got["sent"], got["cut"]) == (2, 1)


def test_receiver_answer_appears_whole(tmp_path):
    """The caller polls for the answer file and reads it at once: it must never see a part.
    6,000 tagged datagrams make a ~120 KB answer (printed through a redirect it once appeared
    in 8 KiB blocks and a poll read a JSON cut at byte 24,576)."""
    token, n = bytes.fromhex("0badcafe"), 6000
    ready, out = tmp_path / "ready", tmp_path / "out"
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.Popen([sys.executable, "-c", RECEIVER, "ipv4", "127.0.0.1", str(port), token.hex(),
                             str(ready), "30", str(out)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-500:]
            time.sleep(0.01)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in [*range(n), 0xFFFFFFFF]:
            s.sendto(b"HILW" + token + struct.pack("!I", i) + bytes(i % 50), ("127.0.0.1", port))
            if i % 500 == 0:
                time.sleep(0.005)  # the socket's buffer is 8 MB; keep well inside it
        s.close()
        while not out.exists():  # as the caller does: the first time the file is there, read it
            assert proc.poll() is None or out.exists(), proc.stderr.read().decode()[-500:]
            time.sleep(0.0005)
        got = json.loads(out.read_text())
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert got["end"] is True and got["other"] == 0
    assert len(got["counts"]) == n and set(got["counts"].values()) == {1}
    assert len(json.dumps(got)) > 24576
    assert not (tmp_path / "out.tmp").exists()
