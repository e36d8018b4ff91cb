"""tests/lab_factory.scratch_rootdir made by several threads at once (the fault matrix's
parts share one rootdir; a CI run failed with FileExistsError on the race)."""
from __future__ import annotations

import threading

from tests.lab_factory import CHECKOUT_LINKS, REPO, scratch_rootdir


def test_parallel_parts_share_one_scratch_rootdir(tmp_path):
    for i in range(30):
        d, errors = tmp_path / f"w{i}", []

        def make() -> None:
            try:
                scratch_rootdir(d)
            except Exception as exc:  # noqa: BLE001 -- collected and asserted below
                errors.append(exc)
        threads = [threading.Thread(target=make) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert all((d / n).resolve() == (REPO / n).resolve() for n in CHECKOUT_LINKS)


def test_a_foreign_file_in_the_way_is_still_an_error(tmp_path):
    (tmp_path / "conftest.py").write_text("# not the repository's\n")
    try:
        scratch_rootdir(tmp_path)
    except FileExistsError:
        return
    raise AssertionError("a file that is not the repository's link was silently kept")
