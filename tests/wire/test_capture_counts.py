"""tcpdump's status line, as Linux's tcpdump 4.99 prints it on SIGUSR1 and FreeBSD's on
SIGINFO (the one-line form of tcpdump.c's info()): the capture's stop reads it to know
that tcpdump has written every packet (ipsec_hil.lab.traffic.capture, issue 15)."""
from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from ipsec_hil.lab.traffic.capture import CaptureCounts, caught_up_command, last_counts

LISTENING = "tcpdump: listening on wan10g, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n"


def test_the_last_complete_line_counts():
    log = (LISTENING
           + "tcpdump: 3 packets captured, 9 packets received by filter, 0 packets dropped by kernel\n"
           + "tcpdump: 9 packets captured, 9 packets received by filter, 0 packets dropped by kernel\n"
           + "tcpdump: 9 packets captured, 9 packets received by")  # a line cut mid-write
    assert last_counts(log) == CaptureCounts(9, 9, 0)


def test_singular_words_and_freebsds_interface_drops():
    log = "tcpdump: 1 packet captured, 1 packet received by filter, 1 packet dropped by kernel, " \
          "2 packets dropped by interface\n"
    assert last_counts(log) == CaptureCounts(1, 1, 1)


def test_the_exit_summary_is_not_a_status_line():
    """tcpdump's summary at exit is three lines (info(1)): not the form the stop asks for."""
    assert last_counts(LISTENING + "10 packets captured\n20 packets received by filter\n"
                       "0 packets dropped by kernel\n") is None


@pytest.mark.parametrize("counts,caught_up", [
    (CaptureCounts(10, 10, 0), True),
    (CaptureCounts(8, 10, 2), True),   # dropped: nothing more will come (the stop then raises)
    (CaptureCounts(9, 10, 0), False),  # one still in tcpdump's buffer
    (CaptureCounts(10, 20, 0), False),  # Linux's lo, FreeBSD with filtered packets: never
    (CaptureCounts(0, 0, 0), True),
])
def test_caught_up(counts, caught_up):
    assert counts.caught_up is caught_up


@pytest.mark.skipif(shutil.which("awk") is None, reason="no awk on this machine")
@pytest.mark.parametrize("log", [
    LISTENING,
    LISTENING + "tcpdump: 10 packets captured, 10 packets received by filter, 0 packets dropped by kernel\n",
    LISTENING + "tcpdump: 9 packets captured, 10 packets received by filter, 0 packets dropped by kernel\n",
    LISTENING + "tcpdump: 1 packet captured, 1 packet received by filter, 0 packets dropped by kernel, "
                "3 packets dropped by interface\n",
    LISTENING + "tcpdump: 8 packets captured, 10 packets received by filter, 2 packets dropped by kernel\n"
                "tcpdump: 8 packets captured, 12 packets received by filter, 2 packets dropped by kernel\n",
    LISTENING + "tcpdump: 11 packets captured, 12 packets received by filter, 0 packets dropped by kernel\n"
                "tcpdump: 12 packets captured, 12 packets received by",
])
def test_the_stop_scripts_awk_agrees_with_python(tmp_path, log):
    """The stop script's check (caught_up_command, in awk) and last_counts share
    STATUS_LINE; they must agree on every log, a cut last line included."""
    path = tmp_path / "tcpdump.log"
    path.write_text(log)
    rc = subprocess.run(["sh", "-c", caught_up_command(shlex.quote(str(path)))]).returncode
    counts = last_counts(log)
    assert (rc == 0) == (counts is not None and counts.caught_up), (rc, counts)
