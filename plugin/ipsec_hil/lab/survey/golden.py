"""``python -m ipsec_hil.lab.survey.golden BUNDLE GOLDEN_DIR``: a survey bundle into golden cases.

Why: the outputs of a real appliance are the best golden files there are ("real samples
first", tests/golden/README.md). Every read of the bundle that has a parser becomes
``GOLDEN_DIR/<parser>/<case>.txt`` (its stdout, setkey's keys already masked) with
``.stderr`` and ``.status`` when not empty/0, ``.args.json`` when the parser is called with
arguments (``{"function", "kwargs"}``), and the expectation: ``<case>.json`` (the survey's
parse, normalised as tests/parsers/golden.py does) or ``<case>.error`` (the ParseError's
message) -- the layout tests/parsers/golden.py loads. The case is named
``survey-<host>-<read>`` (``--prefix`` replaces ``survey``). Raw reads (no parser) are
listed, not converted. An existing case is never overwritten (exit 1 naming it).

Read the new cases before committing them: a ``.json`` pins what the parser reads today.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

#: what a case name may hold (an IPv6 address's colons become _)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class BundleError(Exception):
    """The bundle is not what ipsec-hil-survey writes (names the file and the field)."""


def _case_name(prefix: str, host: str, read: str) -> str:
    return _SAFE.sub("_", f"{prefix}-{host}-{read}")


def convert(bundle: Path, golden: Path, prefix: str = "survey") -> tuple[list[Path], list[str]]:
    """Write the golden cases of ``bundle`` under ``golden``: (the .txt files written, the
    reads skipped with why). BundleError when the bundle's manifest is missing or wrong;
    FileExistsError when a case exists already."""
    manifest_path = bundle / "survey.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        hosts = manifest["hosts"]
    except OSError as exc:
        raise BundleError(f"{manifest_path}: cannot read the survey manifest: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{manifest_path}: not a survey manifest ({type(exc).__name__}: {exc})") from None
    plan: list[tuple[Path, Path, dict]] = []
    skipped: list[str] = []
    for host, h in hosts.items():
        for i, r in enumerate(h.get("reads", [])):
            where = f"{manifest_path}: hosts.{host}.reads[{i}]"
            try:
                name, parser, state = r["name"], r["parser"], r["state"]
            except (KeyError, TypeError):
                raise BundleError(f"{where}: needs name, parser and state") from None
            if parser is None or state not in ("parsed", "not parsed"):
                skipped.append(f"{host}/{name}: {'no parser' if parser is None else state}")
                continue
            src = bundle / host / f"{name}.txt"
            if not src.exists():
                raise BundleError(f"{where}: {src} is missing")
            dest = golden / parser / (_case_name(prefix, host, name) + ".txt")
            if dest.exists():
                raise FileExistsError(f"{dest} exists already (choose another --prefix)")
            plan.append((src, dest, r))
    written = []
    for src, dest, r in plan:
        dest.parent.mkdir(parents=True, exist_ok=True)
        stem, base = dest.name[:-4], src.name[:-4]
        shutil.copyfile(src, dest)
        stderr = src.with_name(base + ".stderr")
        if stderr.exists() and stderr.read_text(encoding="utf-8"):
            shutil.copyfile(stderr, dest.with_name(stem + ".stderr"))
        status = r.get("status")
        if status not in (None, 0):
            dest.with_name(stem + ".status").write_text(f"{status}\n", encoding="utf-8")
        if r.get("kwargs") or r.get("function", "parse") != "parse":
            args = {"function": r.get("function", "parse"), "kwargs": r.get("kwargs") or {}}
            dest.with_name(stem + ".args.json").write_text(json.dumps(args) + "\n", encoding="utf-8")
        if r["state"] == "parsed":
            shutil.copyfile(src.with_name(base + ".parsed.json"), dest.with_name(stem + ".json"))
        else:
            message = src.with_name(base + ".error").read_text(encoding="utf-8").splitlines()[0]
            dest.with_name(stem + ".error").write_text(message + "\n", encoding="utf-8")
        written.append(dest)
    return written, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil.lab.survey.golden",
                                 description="Turn a survey bundle into golden cases (tests/golden layout).")
    ap.add_argument("bundle", type=Path, help="the directory ipsec-hil-survey --out wrote")
    ap.add_argument("golden", type=Path, help="the golden directory (tests/golden)")
    ap.add_argument("--prefix", default="survey", help="case names start with this (default survey)")
    args = ap.parse_args(argv)
    try:
        written, skipped = convert(args.bundle, args.golden, args.prefix)
    except (BundleError, FileExistsError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    for p in written:
        print(f"wrote {p}")
    for s in skipped:
        print(f"skipped {s}")
    print(f"{len(written)} golden case(s); read each .json before committing it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
