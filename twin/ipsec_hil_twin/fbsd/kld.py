"""kldload(8) / kldunload(8) / kldstat(8) of FreeBSD 14 over state.json.

state.json keeps the loaded files (`modules`: name, file, size, md5, refs, address, id).
Loading the host's offload driver (host.json `driver`, e.g. npuep -> npuep.ko from
/boot/modules, i.e. DIR/root/boot/modules) records the file's md5 and size and tells the
engine `set_driver`, so the engine "becomes" that build.  A module file containing the
marker `twin-unresolved-symbol=NAME` fails to link as FreeBSD does (ENOEXEC, and
`link_elf_obj: symbol NAME undefined` in dmesg).  Two markers make a driver file a build
that behaves differently, each a regression of its own kind (issue 41):

- `twin-rate-factor=F` (0 < F <= 1): a build whose engine is slower -- the engine paces
  the offloaded SAs to F times the host's slowest port (issue 14: a candidate build that is
  measurably slower than its parent, for the merge decision's end-to-end test);
- `twin-cpu-factor=F` (F > 0): a build that reaches the same rate but costs F times the
  CPU per packet (1.053: 5.3 % more; F < 1 a cheaper build) -- every packet of an
  offloaded SA charges F times the model's cost (ipsec_hil_twin.engine.cost), which
  `sysctl kern.cp_time` shows as intr ticks.

Both reach the engine in `set_driver` (`rate_factor`, `cpu_factor`) and are kept in
state.json's driver record (ipsec_hil_twin.lifecycle.lab sends them again when the engine
restarts at boot); a value out of range is refused as EINVAL (dmesg names it), and
unloading the driver resets both to 1.0 (the engine's set_driver with loaded false).
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

from ipsec_hil_twin.fbsd import _common as c

TYPE_CHECKING = False  # typing is not imported at run time: every emulated command pays for its imports
if TYPE_CHECKING:
    from typing import Any

MODULE_PATH = ("/boot/kernel", "/boot/modules")
UNRESOLVED_RE = re.compile(rb"twin-unresolved-symbol=([A-Za-z0-9_]+)")
RATE_FACTOR_RE = re.compile(rb"twin-rate-factor=([0-9]*\.?[0-9]+)")
CPU_FACTOR_RE = re.compile(rb"twin-cpu-factor=([0-9]*\.?[0-9]+)")


def rate_factor(data: bytes) -> float:
    """The build's engine speed relative to a normal build (1.0 without the marker)."""
    m = RATE_FACTOR_RE.search(data)
    return float(m.group(1)) if m else 1.0


def cpu_factor(data: bytes) -> float:
    """The build's CPU per packet relative to a normal build (1.0 without the marker)."""
    m = CPU_FACTOR_RE.search(data)
    return float(m.group(1)) if m else 1.0


def bad_factor(data: bytes) -> str | None:
    """The marker a driver build cannot attach with (`twin-rate-factor=1.5`), or None."""
    rate, cpu = rate_factor(data), cpu_factor(data)
    if not 0.0 < rate <= 1.0:
        return f"twin-rate-factor={rate} out of (0, 1]"
    if not cpu > 0.0:
        return f"twin-cpu-factor={cpu} out of (0, inf)"
    return None


DRIVER_DESC = {"npuep": "<NPU crypto engine>", "octep": "<OCTEON crypto coprocessor>"}
BUILTIN_SIZES = {"ipsec.ko": 0x5B2F8}
"""Kernel modules the twin does not ship as files (not under test): FreeBSD 14's size."""


def _base(name: str) -> str:
    return name[:-3] if name.endswith(".ko") else name


def find_loaded(st: dict[str, Any], name: str) -> dict[str, Any] | None:
    b = _base(os.path.basename(name))
    for m in st["modules"]:
        if _base(str(m.get("name"))) == b:
            return m
    return None


def resolve(hd, name: str) -> tuple[str, Path | None]:
    """(appliance path, host path or None if it does not exist) of a module argument."""
    if "/" in name:
        return name, (c.appliance_path(hd, name) if c.appliance_path(hd, name).is_file() else None)
    fname = name if name.endswith(".ko") else name + ".ko"
    for d in MODULE_PATH:
        p = c.appliance_path(hd, f"{d}/{fname}")
        if p.is_file():
            return f"{d}/{fname}", p
    if fname in BUILTIN_SIZES:
        return f"/boot/kernel/{fname}", None
    return name, None


def _next_address(st: dict[str, Any]) -> str:
    top = 0xFFFFFFFF82000000
    for m in st["modules"]:
        try:
            a = int(str(m.get("address", "0")), 16) + int(m.get("size", 0))
        except ValueError:
            continue
        top = max(top, a)
    top = (top + 0x1FFFFF) & ~0x1FFFFF
    return f"0x{top:016x}"


def kldload(argv: list[str]) -> int:
    prog = "kldload"
    args = list(argv)
    nflag = vflag = qflag = False
    while args and args[0].startswith("-") and len(args[0]) > 1:
        letters = c.option_letters(prog, args.pop(0), "nvq", "usage: kldload [-nqv] file ...\n")
        if letters is None:
            return 1
        nflag, vflag, qflag = nflag or "n" in letters, vflag or "v" in letters, qflag or "q" in letters
    if not args:
        sys.stderr.write("usage: kldload [-nqv] file ...\n")
        return 1
    hd = c.host_dir()
    host = c.host_info(hd)
    driver = str(host.get("driver") or "")
    errors = 0
    for name in args:
        st = c.load_state(hd)
        if find_loaded(st, name):
            if nflag:
                continue
            if not qflag:
                c.err(prog, f"can't load {name}: module already loaded or in kernel")
            errors += 1
            continue
        apath, hpath = resolve(hd, name)
        fname = os.path.basename(apath)
        if not fname.endswith(".ko"):
            fname += ".ko"
        if hpath is None and fname not in BUILTIN_SIZES:
            if not qflag:
                c.err(prog, f"can't load {name}: No such file or directory")
            errors += 1
            continue
        data = hpath.read_bytes() if hpath is not None else b""
        size = len(data) if hpath is not None else BUILTIN_SIZES[fname]
        md5 = hashlib.md5(data).hexdigest() if hpath is not None else ""
        m = UNRESOLVED_RE.search(data)
        if m:
            c.log_dmesg(hd, [f"link_elf_obj: symbol {m.group(1).decode()} undefined",
                             f"linker_load_file: {apath} - unsupported file type"])
            if not qflag:
                c.err(prog, "an error occurred while loading the module. "
                            "Please check dmesg(8) for more details.")
            errors += 1
            continue
        new_id = max([int(x.get("id", i + 1)) for i, x in enumerate(st["modules"])] + [0]) + 1
        entry = {"id": new_id, "name": fname, "file": apath, "size": size, "md5": md5,
                 "refs": 1, "address": _next_address(st)}
        factor, cpu = rate_factor(data), cpu_factor(data)
        bad = bad_factor(data)
        if driver and _base(fname) == driver and bad is not None:
            c.log_dmesg(hd, [f"{driver}0: {bad}; not attached"])
            if not qflag:
                c.err(prog, f"can't load {name}: Invalid argument")
            errors += 1
            continue
        if driver and _base(fname) == driver:
            try:
                c.engine(hd, {"op": "set_driver", "loaded": True, "md5": md5, "name": driver,
                              "size": size, "file": apath, "rate_factor": factor, "cpu_factor": cpu})
            except c.EngineError as exc:
                c.err(prog, f"can't load {name}: {exc}")
                errors += 1
                continue
            # same shape ipsec_hil_twin.lifecycle.lab's boot_state writes
            st["driver"] = {"name": fname, "file": apath, "md5": md5, "size": size,
                            "loaded": True, "driver": driver, "rate_factor": factor, "cpu_factor": cpu}
            c.log_dmesg(hd, [f"{driver}0: {DRIVER_DESC.get(driver, '<offload engine>')} "
                             f"mem 0xf0000000-0xf0ffffff irq 40 at device 0.0 on pci2",
                             f"{driver}0: IPsec offload enabled, build md5 {md5[:8]}"])
        st["modules"].append(entry)
        c.save_state(hd, st)
        if vflag:
            print(f"Loaded {name}, id={new_id}")
    return 1 if errors else 0


def kldunload(argv: list[str]) -> int:
    prog = "kldunload"
    args = list(argv)
    vflag = False
    by_id: int | None = None
    while args and args[0].startswith("-") and len(args[0]) > 1:
        a = args.pop(0)
        if a == "-i" and args:
            try:
                by_id = int(args.pop(0))
            except ValueError:
                sys.stderr.write("kldunload: invalid id\n")
                return 1
            continue
        letters = c.option_letters(prog, a, "vfn", "usage: kldunload [-fv] -i id ...\n"
                                   "       kldunload [-fv] [-n] name ...\n")
        if letters is None:
            return 1
        vflag = vflag or "v" in letters
    hd = c.host_dir()
    host = c.host_info(hd)
    driver = str(host.get("driver") or "")
    targets: list[str | int] = list(args) if by_id is None else [by_id]
    if not targets:
        sys.stderr.write("usage: kldunload [-fv] -i id ...\n       kldunload [-fv] [-n] name ...\n")
        return 1
    errors = 0
    for t in targets:
        st = c.load_state(hd)
        if isinstance(t, int):
            m = next((x for x in st["modules"] if int(x.get("id", 0)) == t), None)
        else:
            m = find_loaded(st, t)
        if m is None:
            c.err(prog, f"can't find file {t}")
            errors += 1
            continue
        if m.get("name") == "kernel":
            c.err(prog, "can't unload file: Operation not permitted")
            errors += 1
            continue
        if vflag:
            print(f"Unloading {m['name']}, id={m.get('id')}")
        if driver and _base(str(m["name"])) == driver:
            try:
                c.engine(hd, {"op": "set_driver", "loaded": False, "name": driver})
            except c.EngineError as exc:
                c.err(prog, f"can't unload file: {exc}")
                errors += 1
                continue
            st["driver"] = None
            c.log_dmesg(hd, [f"{driver}0: detached"])
        st["modules"] = [x for x in st["modules"] if x is not m]
        c.save_state(hd, st)
    return 1 if errors else 0


HN_DIVISOR = 1024
HN_DECCUT = 973  # ceil(.95 * 1024)
HN_PREFIXES = ("", "K", "M", "G", "T", "P", "E")


def humanize_size(size: int, width: int = 5) -> str:
    """libutil humanize_number(buf, 5, size, "", HN_AUTOSCALE, HN_DECIMAL | HN_NOSPACE),
    what `kldstat -h` prints (sbin/kldstat/kldstat.c printfile): at most 4 characters,
    powers of 1024, one decimal below 10 (`5.8K`, `31M`, `364K`, `812B`-less `812`)."""
    quotient, remainder, i = int(size), 0, 0
    baselen = 2  # digit + prefix (HN_NOSPACE, empty suffix)
    maximum = 10 ** (width - baselen)
    while (quotient >= maximum or (quotient == maximum - 1 and (remainder >= HN_DECCUT
                                                                   or remainder >= HN_DIVISOR // 2))) and i < 6:
        remainder = quotient % HN_DIVISOR
        quotient //= HN_DIVISOR
        i += 1
    if ((quotient == 9 and remainder < HN_DECCUT) or quotient < 9) and i > 0:
        s1 = quotient + ((remainder * 10 + HN_DIVISOR // 2) // HN_DIVISOR // 10)
        s2 = ((remainder * 10 + HN_DIVISOR // 2) // HN_DIVISOR) % 10
        return f"{s1}.{s2}{HN_PREFIXES[i]}"
    return f"{quotient + (remainder + HN_DIVISOR // 2) // HN_DIVISOR}{HN_PREFIXES[i]}"


def kldstat_rows(st: dict[str, Any], humanized: bool = False) -> list[str]:
    """Header + one row per file, as kldstat.c printfile (14 and 15 alike): `%2d %4d %*p
    %8zx %s`, or with -h `%2d %4d %*p %5s %s` over humanize_size; the header's Size is
    right-aligned to the same width (`%8s` / `%5s`)."""
    rows = ["Id Refs Address%*c %*s Name" % (18 - 7, " ", 5 if humanized else 8, "Size")]
    top = 0xFFFFFFFF80200000
    mods = st["modules"]
    for i, m in enumerate(mods, 1):
        mid = int(m.get("id", i))
        size = int(m.get("size", 0))
        addr = m.get("address")
        if not addr:
            addr = f"0x{top:016x}"
        top = max(top, int(str(addr), 16) + size)
        top = (top + 0x1FFFFF) & ~0x1FFFFF
        refs = int(m.get("refs", len(mods) if m.get("name") == "kernel" else 1))
        if humanized:
            rows.append("%2d %4d %18s %5s %s" % (mid, refs, addr, humanize_size(size), m["name"]))
        else:
            rows.append("%2d %4d %18s %8x %s" % (mid, refs, addr, size, m["name"]))
    return rows


def kldstat(argv: list[str]) -> int:
    prog = "kldstat"
    args = list(argv)
    qflag = vflag = hflag = False
    valued: dict[str, str] = {}  # -m modname, -n filename, -i id (ids are not emulated)
    while args:
        a = args.pop(0)
        if a in ("-m", "-n", "-i") and args:
            valued[a] = args.pop(0)
            continue
        if a.startswith("-") and len(a) > 1:
            letters = c.option_letters(prog, a, "qvdh", "usage: kldstat [-dhqv] [-i id] [-n filename]\n"
                                       "       kldstat [-dhq] [-m modname]\n")
            if letters is None:
                return 1
            qflag, vflag = qflag or "q" in letters, vflag or "v" in letters
            hflag = hflag or "h" in letters
            continue
        valued["-n"] = a
    modname, filename = valued.get("-m"), valued.get("-n")
    hd = c.host_dir()
    st = c.load_state(hd)
    if modname is not None or filename is not None:
        want = modname if modname is not None else filename
        m = find_loaded(st, str(want))
        if m is None:
            if not qflag:
                if modname is not None:
                    c.err(prog, f"can't find module {modname}: No such file or directory")
                else:
                    c.err(prog, f"can't find file {filename}: No such file or directory")
            return 1
        if qflag:
            return 0
        rows = kldstat_rows({"modules": [m]}, hflag)
        if modname is not None:
            print("Id  Refs Name")
            print("%3d %4d %s" % (int(m.get("id", 1)), int(m.get("refs", 1)), _base(str(m["name"]))))
            return 0
        print("\n".join(rows))
        return 0
    rows = kldstat_rows(st, hflag)
    out = [rows[0]]
    for m, row in zip(st["modules"], rows[1:]):
        out.append(row + (f" ({m.get('file')})" if vflag else ""))
        if vflag:
            out.append("\tContains modules:")
            out.append("\t\t Id Name")
            out.append("\t\t%3d %s" % (int(m.get("id", 1)), _base(str(m["name"]))))
    print("\n".join(out))
    return 0
