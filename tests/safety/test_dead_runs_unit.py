"""What a run says about the dead runs whose state it undid (ipsec_hil.lab.dead_runs), without a lab.

The record groups what was undone by dead run (``pid N on MACHINE``, from the lease it took
over or the journal's writers), says it in ONE line for the first screen and the terminal
(per host: the driver restored with the module's md5, the tunnel's changes, the bench's
routes), in a section below (whose run, the step it died after, every line undone, the
module now) and in Allure's environment; a recovery that could not finish is the run's stop
message, naming what is left. An xdist worker's record travels to the controller whole.
"""

from __future__ import annotations

from ipsec_hil.lab import files
from ipsec_hil.lab.dead_runs import Found, Undone, died_after, whose
from ipsec_hil.lab.reporting.page import render_section
from ipsec_hil.lab.reporting.sections import dead_runs
from ipsec_hil.lab.sharing.lock import LockInfo


def _section(found: Found) -> str | None:
    """The page's "Recovered from dead runs" as text (ipsec_hil.lab.reporting.sections)."""
    section = dead_runs(found)
    return render_section(section) + "\n" if section else None


MD5 = "4e69f85b0b8484af3b1627cdc43d4ca3"


def _entries() -> list[files.JournalEntry]:
    b = files.Backup(path="/boot/modules/octep.ko", existed=True, sha256="a" * 64, size=2095,
                     backup_path="/j/x.bak", journal_path="/j/x.json", run_id="drv-1", created=1_800_000_000.0,
                     host="dut3300", machine="alice@ws3", pid=4711)
    u = files.UndoEntry(what="bench: route 198.51.100.65/32 via 198.51.100.1 (proto 147)", script="true",
                        journal_path="/j/y.undo", run_id="r-5f2c", created=1_800_000_009.0, host="bench",
                        machine="alice@ws3", pid=4711)
    return [b, u]


def test_whose_names_the_dead_run_once_from_its_lease_and_its_journal():
    lease = LockInfo(holder="alice@ws3: pytest --driver", host="ws3", pid=4711, time=1_799_999_990.0, run_id="drv-1")
    run, since, words = whose(_entries(), lease)
    assert run == "pid 4711 on ws3" and since == 1_799_999_990.0
    assert words[0].startswith("alice@ws3: pytest --driver (run drv-1), holding its lease since 2027-01-15")
    assert "its journal: run drv-1 of alice@ws3 (pid 4711)" in words[1] and "run r-5f2c" in words[2]
    assert died_after(_entries()).startswith("bench: route 198.51.100.65/32 via 198.51.100.1 (proto 147) (journalled")
    assert whose([], None) == ("not recorded", 0.0, ())


def test_one_line_a_section_and_allure_values():
    found = Found()
    run, since, words = whose(_entries())
    found.add(Undone("dut3300", "driver", ("/boot/modules/octep.ko (2095 bytes ...)", "reloaded"), run, since, words,
                     "backup of /boot/modules/octep.ko", f"octep md5 {MD5}, 2,095 bytes, loaded", MD5))
    found.add(Undone("bench", "bench", ("undone: bench: route 198.51.100.65/32 via 198.51.100.1 (proto 147)",),
                     run, since, words))
    found.note("xgs136: in use by a live run (bob on ws7): its tunnel journal is recovered when this run's tunnel "
               "takes its lease")
    line = found.line()
    assert line is not None and "\n" not in line
    assert line.startswith("Found a dead run's state and undid it before measuring: pid 4711 on ws3, started ")
    assert f"dut3300: driver restored: md5 {MD5[:8]}, loaded; bench: 1 route(s)" in line
    section = _section(found)
    assert section is not None and section.startswith("## Recovered from dead runs\n")
    assert f"  - now: octep md5 {MD5}, 2,095 bytes, loaded" in section
    assert "  - undone: bench: route 198.51.100.65/32" in section  # the recovery's own prefix not doubled
    assert "it died after its last journalled change: backup of /boot/modules/octep.ko" in section
    assert "Said, not undone:" in section and "xgs136: in use by a live run" in section
    env = found.environment()
    assert env["recovery.found"] == "2 journal(s) of 1 dead run(s) undone"
    assert env["recovery.dut3300.driver.now"] == f"octep md5 {MD5}, 2,095 bytes, loaded"
    assert found.stop_message() is None
    # an xdist worker's record, merged by the controller: the same, once
    other = Found()
    other.merge(found.to_list())
    other.merge(found.to_list())
    assert other.undone == found.undone and other.notes == found.notes


def test_a_recovery_that_could_not_finish_is_the_runs_stop_message():
    found = Found()
    found.fail("peer3300, driver journal: restore of /boot/modules/octep.ko failed; left: /boot/modules/octep.ko "
               "(2095 bytes, backed up by run drv-1)")
    assert found.line() == ("RECOVERY INCOMPLETE: 1 journal(s) still hold a dead run's state "
                            "(peer3300, driver journal).")
    message = found.stop_message()
    assert message is not None and "what is left: peer3300, driver journal" in message and "left: /boot" in message
    assert "**Not undone**" in (_section(found) or "")


def test_a_journal_entry_names_its_writer_and_older_entries_still_read():
    b = _entries()[0]
    assert files.Backup.from_json(b.to_json(), "w") == b
    assert b.writer() == "run drv-1 of alice@ws3 (pid 4711)"
    old = '{"path": "/p", "existed": false, "size": 0, "backup_path": "", "journal_path": "/j/o.json", "run_id": "x"}'
    e = files.Backup.from_json(old, "w")
    assert (e.machine, e.pid, e.writer()) == ("", 0, "run x")
