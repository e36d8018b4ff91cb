"""FileChanges (ipsec_hil_twin.machinery.labprocs): what wakes the engine's control when
faults.json changes, instead of a look ten times a second (issue 39)."""

from __future__ import annotations

import json
import os
import select

from ipsec_hil_twin.machinery.labprocs import FileChanges


def _readable(w: FileChanges) -> bool:
    return bool(select.select([w], [], [], 0.5)[0])


def test_a_replace_of_the_file_wakes_and_is_named(tmp_path):
    w = FileChanges(tmp_path, "faults.json")
    try:
        assert not _readable(w) and not w.changed()  # nothing happened: no wake-up
        tmp = tmp_path / "faults.json.tmp"
        tmp.write_text(json.dumps({"drop_every": {"n": 2}}))
        os.replace(tmp, tmp_path / "faults.json")  # how the faults are written (an atomic replace)
        assert _readable(w) and w.changed()
        assert not w.changed()  # read: the queue is empty again
    finally:
        w.close()


def test_another_file_in_the_directory_wakes_but_is_not_a_change(tmp_path):
    w = FileChanges(tmp_path, "faults.json")
    try:
        (tmp_path / "state.json").write_text("{}")
        assert _readable(w)
        assert not w.changed()
        (tmp_path / "faults.json").write_text("{}")  # written in place, closed
        assert w.changed()
        (tmp_path / "faults.json").unlink()  # removed: no fault any more
        assert w.changed()
    finally:
        w.close()
