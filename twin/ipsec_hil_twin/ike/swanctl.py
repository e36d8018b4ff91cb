"""`swanctl` on an emulated appliance: strongSwan 5.9.8's output formats and exit codes.

Why: the suite parses swanctl's text exactly as it comes from the hardware, so this CLI
prints what `src/swanctl/commands/*.c` print (checked against a real 5.9.8 on this
machine, see tests/twin_ike/).  It talks to ipsec_hil_twin.ike.daemon over $TWIN_HOST_DIR/ike.sock;
the daemon parses the configuration files itself (same filesystem).

Commands: --load-all (-q) [--noprompt] [--file F], --initiate (-i) --child X [--ike Y]
[--timeout S], --terminate (-t) --ike X | --child X | --ike-id N | --child-id N [--force]
[--timeout S], --rekey (-R) --child X | --ike X,
--list-sas (-l) [--ike X] [--child X] [--raw|--pretty], --list-conns (-L), --stats (-S).
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
from functools import partial

from ipsec_hil_twin.errors import ControlSocketError, IkeError
from ipsec_hil_twin.jsonl import JsonlClient
from ipsec_hil_twin.machinery.runtime import HostDir

TYPE_CHECKING = False  # typing is not imported at run time: every emulated command pays for its imports
if TYPE_CHECKING:
    from typing import Any, Iterator

SWANCTL_CONF = "/usr/local/etc/swanctl/swanctl.conf"
VICI_URI = "unix:///var/run/charon.vici"

COMMANDS = {
    "--load-all": "load-all", "-q": "load-all", "--initiate": "initiate", "-i": "initiate",
    "--terminate": "terminate", "-t": "terminate", "--rekey": "rekey", "-R": "rekey",
    "--list-sas": "list-sas", "-l": "list-sas", "--list-conns": "list-conns", "-L": "list-conns",
    "--stats": "stats", "-S": "stats", "--load-conns": "load-all", "-c": "load-all",
}

USAGE = {
    "load-all": "  swanctl --load-all [--raw|--pretty] [--clear] [--noprompt]",
    "initiate": "  swanctl --initiate [--child <name>] [--ike <name>] [--timeout <s>] [--raw|--pretty]",
    "terminate": "  swanctl --terminate --child <name> | --ike <name> | --child-id <id> | --ike-id <id>\n"
                 "                 [--timeout <s>] [--raw|--pretty]",
    "rekey": "  swanctl --rekey --child <name> | --ike <name> [--reauth] [--raw|--pretty]",
    "list-sas": "  swanctl --list-sas [--ike <name>|--ike-id <id>] [--child <name>|--child-id <id>]\n"
                "                 [--raw|--pretty]",
    "list-conns": "  swanctl --list-conns [--raw|--pretty]",
    "stats": "  swanctl --stats [--raw|--pretty]",
}


class Unreachable(IkeError):
    """The daemon (charon) is not running: errno for the exit status."""

    def __init__(self, err: int) -> None:
        self.err = err
        super().__init__(os.strerror(err))


def host_dir() -> HostDir:
    return HostDir.from_env()


def _connect(hd: HostDir) -> JsonlClient:
    try:
        return JsonlClient(hd.ike_sock, timeout=None)  # the daemon bounds initiate itself
    except ControlSocketError as exc:
        raise Unreachable(exc.errno or errno.ECONNREFUSED) from None


def call(hd: HostDir, req: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Send one request; yield every JSON line of the answer."""
    with _connect(hd) as client:
        yield from client.stream(req)


def one(hd: HostDir, req: dict[str, Any]) -> dict[str, Any]:
    for msg in call(hd, req):
        return msg
    raise Unreachable(errno.ECONNRESET)


# ---------------------------------------------------------------- formatting
def format_list_sas(sas: list[dict[str, Any]]) -> str:
    out: list[str] = []
    w = out.append
    for sa in sas:
        star_i, star_r = ("*", "") if sa["initiator"] else ("", "*")
        w(f"{sa['name']}: #{sa['uniqueid']}, {sa['state']}, IKEv{sa['version']}, "
          f"{sa['initiator_spi']}_i{star_i} {sa['responder_spi']}_r{star_r}")
        w(f"  local  '{sa['local_id']}' @ {sa['local_host']}[{sa['local_port']}]")
        w(f"  remote '{sa['remote_id']}' @ {sa['remote_host']}[{sa['remote_port']}]")
        w(f"  {sa['listing']}")
        w(f"  established {sa['established']}s ago{_in(', rekeying in', sa.get('rekey_time'))}")
        if sa.get("tasks_active"):
            w("  active:  " + " ".join(sa["tasks_active"]))
        for c in sa["children"]:
            w(f"  {c['name']}: #{c['uniqueid']}, reqid {c['reqid']}, {c['state']}, {c['mode']}, "
              f"{c['protocol']}:{c['listing']}")
            w(f"    installed {c['install_time']}s ago{_in(', rekeying in', c.get('rekey_time'))}"
              f"{_in(', expires in', c.get('life_time'))}")
            for d in ("in", "out"):
                line = (f"    {d}{' ' if d == 'in' else ''} {c['spi_' + d]}, {c['bytes_' + d]:>6} bytes, "
                        f"{c['packets_' + d]:>5} packets")
                if c.get("use_" + d) is not None:
                    line += f", {c['use_' + d]:>5}s ago"
                w(line)
            w("    local  " + " ".join(c["local_ts"]))
            w("    remote " + " ".join(c["remote_ts"]))
    return "".join(line + "\n" for line in out)


def _in(label: str, seconds: int | None) -> str:
    """list_sas.c prints `rekeying in`/`expires in` only when vici sent the time (it is
    unset when the lifetime is 0, and may be negative once the moment has passed)."""
    return "" if seconds is None else f"{label} {seconds}s"


def _raw_value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def vici_raw(d: dict[str, Any]) -> str:
    """A vici message body as `swanctl --raw` prints it (key=value, sections in braces)."""
    parts = []
    for k, v in d.items():
        if v is None:
            continue
        if isinstance(v, dict):
            parts.append(f"{k} {{{vici_raw(v)}}}")
        elif isinstance(v, list):
            parts.append(f"{k}=[{' '.join(_raw_value(x) for x in v)}]")
        else:
            parts.append(f"{k}={_raw_value(v)}")
    return " ".join(parts)


def vici_sa(sa: dict[str, Any]) -> dict[str, Any]:
    """One list-sa event body, key spellings as vici's (hyphenated)."""
    body: dict[str, Any] = {
        "uniqueid": sa["uniqueid"], "version": sa["version"], "state": sa["state"],
        "local-host": sa["local_host"], "local-port": sa["local_port"], "local-id": sa["local_id"],
        "remote-host": sa["remote_host"], "remote-port": sa["remote_port"], "remote-id": sa["remote_id"],
    }
    if sa["initiator"]:
        body["initiator"] = "yes"
    body.update({"initiator-spi": sa["initiator_spi"], "responder-spi": sa["responder_spi"],
                 "encr-alg": sa["encr_alg"], "encr-keysize": sa["encr_keysize"]})
    if sa.get("integ_alg"):
        body["integ-alg"] = sa["integ_alg"]
    body.update({"prf-alg": sa["prf_alg"], "dh-group": sa["dh_group"], "established": sa["established"]})
    if sa.get("rekey_time") is not None:
        body["rekey-time"] = sa["rekey_time"]
    if sa.get("tasks_active"):
        body["tasks-active"] = list(sa["tasks_active"])
    kids: dict[str, Any] = {}
    for c in sa["children"]:
        cb: dict[str, Any] = {"name": c["name"], "uniqueid": c["uniqueid"], "reqid": c["reqid"],
                              "state": c["state"], "mode": c["mode"], "protocol": c["protocol"],
                              "spi-in": c["spi_in"], "spi-out": c["spi_out"], "encr-alg": c["encr_alg"],
                              "encr-keysize": c["encr_keysize"]}
        if c.get("integ_alg"):
            cb["integ-alg"] = c["integ_alg"]
        if c.get("esn"):
            cb["esn"] = 1  # vici list_child: after the algorithms, only when negotiated
        cb.update({"bytes-in": c["bytes_in"], "packets-in": c["packets_in"]})
        if c.get("use_in") is not None:
            cb["use-in"] = c["use_in"]
        cb.update({"bytes-out": c["bytes_out"], "packets-out": c["packets_out"]})
        if c.get("use_out") is not None:
            cb["use-out"] = c["use_out"]
        for key in ("rekey_time", "life_time"):
            if c.get(key) is not None:
                cb[key.replace("_", "-")] = c[key]
        cb.update({"install-time": c["install_time"], "local-ts": c["local_ts"], "remote-ts": c["remote_ts"]})
        kids[f"{c['name']}-{c['uniqueid']}"] = cb
    body["child-sas"] = kids
    return {sa["name"]: body}


def _pretty(name: str, d: dict[str, Any], indent: int = 0) -> list[str]:
    pad = "  " * indent
    lines = [f"{pad}{name} {{"]
    for k, v in d.items():
        if isinstance(v, dict):
            lines += _pretty(k, v, indent + 1)
        elif isinstance(v, list):
            lines.append(f"{pad}  {k} = [")
            lines += [f"{pad}    {_raw_value(x)}" for x in v]
            lines.append(f"{pad}  ]")
        else:
            lines.append(f"{pad}  {k} = {_raw_value(v)}")
    lines.append(f"{pad}}}")
    return lines


def format_list_conns(conns: list[dict[str, Any]]) -> str:
    out: list[str] = []
    w = out.append
    for c in conns:
        ver = {0: "IKEv1/2", 1: "IKEv1", 2: "IKEv2"}[c["version"]]
        w(f"{c['name']}: {ver}, no reauthentication, rekeying every {c['rekey_time']}s")
        for a in c["local_addrs"]:
            w(f"  local:  {a}")
        for a in c["remote_addrs"]:
            w(f"  remote: {a}")
        w("  local pre-shared key authentication:")
        if c["local_id"] != "%any":
            w(f"    id: {c['local_id']}")
        w("  remote pre-shared key authentication:")
        if c["remote_id"] != "%any":
            w(f"    id: {c['remote_id']}")
        for ch in c["children"]:
            w(f"  {ch['name']}: {ch['mode']}, rekeying every {ch['rekey_time']}s")
            w("    local:  " + " ".join(ch["local_ts"]))
            w("    remote: " + " ".join(ch["remote_ts"]))
    return "".join(line + "\n" for line in out)


# ---------------------------------------------------------------- commands
def resolve_conf(hd: HostDir, path: str | None) -> str:
    """An appliance path (`/usr/local/etc/...`) mapped into the host's root/ when it exists there."""
    p = path or SWANCTL_CONF
    mapped = hd.rootpath(p) if os.path.isabs(p) else None
    if mapped is not None and mapped.exists():
        return str(mapped)
    return p if os.path.exists(p) or mapped is None else str(mapped)


def cmd_load_all(hd: HostDir, args: argparse.Namespace) -> int:
    file = resolve_conf(hd, args.file)
    res = one(hd, {"op": "load", "file": file})
    root = str(hd.root)

    def shown(text: str) -> str:
        """Paths as the appliance sees them (`/usr/local/etc/...`), not the host's root/."""
        return text.replace(root + "/", "/")
    shown_file = args.file or SWANCTL_CONF
    if res.get("missing"):  # as 5.9.8 (measured): two lines, then an empty load, exit 0
        print(f"no files found matching '{shown_file}'", file=sys.stderr)
        print(f"failed to open config file '{shown_file}'", file=sys.stderr)
    for w in res.get("warnings", []):
        if w.startswith("no files found matching"):
            print(shown(w), file=sys.stderr)
    if res.get("syntax_error"):
        print(shown(res["syntax_error"]), file=sys.stderr)
        print(f"invalid config file '{args.file or SWANCTL_CONF}'", file=sys.stderr)
    for s in res.get("secrets", []):
        print(f"loaded ike secret '{s}'")
    print("no authorities found, 0 unloaded")
    print("no pools found, 0 unloaded")
    for w in res.get("warnings", []):
        if not w.startswith("no files found matching"):
            print(f"warning: {w}", file=sys.stderr)
    for e in res.get("errors", []):
        if e["kind"] == "secret":
            print(f"{shown(e['where'])}: {e['why']}", file=sys.stderr)
            print(f"loading shared secret '{e['name']}' failed", file=sys.stderr)
            continue
        print(f"{shown(e['where'])}: {e['why']} (connection '{e['name']}')", file=sys.stderr)
        print(f"loading connection '{e['name']}' failed: {e['why']}, config discarded", file=sys.stderr)
    for name in res.get("loaded", []):
        print(f"loaded connection '{name}'")
    found, loaded, unloaded = res.get("found", 0), len(res.get("loaded", [])), res.get("unloaded", 0)
    if found == 0:
        print(f"no connections found, {unloaded} unloaded")
        return 0
    if loaded == found:
        print(f"successfully loaded {loaded} connections, {unloaded} unloaded")
        return 0
    print(f"loaded {loaded} of {found} connections, {found - loaded} failed to load, {unloaded} unloaded",
          file=sys.stderr)
    return errno.EINVAL


def _stream(hd: HostDir, req: dict[str, Any], verb: str, show_log: bool = True) -> int:
    for msg in call(hd, req):
        if "log" in msg:
            if show_log:
                print(msg["log"], flush=True)
        elif msg.get("done"):
            if msg.get("ok"):
                print(f"{verb} completed successfully")
                return 0
            print(f"{verb} failed: {msg.get('error')}", file=sys.stderr)
            return 1
    print(f"{verb} failed: connection to the daemon lost", file=sys.stderr)
    return 1


MISSING_NAME = {"initiate": "missing configuration name", "rekey": "please specify --child or --ike"}
"""The twin's complaint when neither --child nor --ike is given, per command."""


def atoi(text: str | None) -> int:
    """C's atoi, as terminate.c reads --child-id/--ike-id: leading digits, else 0 (an id
    that is not a number selects nothing, and vici then answers "missing terminate
    selector" when nothing else was named)."""
    digits = ""
    for ch in (text or "").strip():
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def cmd_terminate(hd: HostDir, args: argparse.Namespace) -> int:
    """terminate.c: names, unique ids, --force and --timeout go to the daemon as vici's
    request; the selector check is the daemon's (vici_control.c), as in 5.9.8."""
    req = {"op": "terminate", "child": args.child, "ike": args.ike, "child_id": atoi(args.child_id),
           "ike_id": atoi(args.ike_id), "force": args.force, "timeout": args.timeout or None}
    return _stream(hd, req, "terminate")


def _named_op(op: str, hd: HostDir, args: argparse.Namespace) -> int:
    """--initiate / --terminate / --rekey: the same request shape, streamed logs, one verdict."""
    if not args.child and not args.ike:
        print(f"{op} failed: {MISSING_NAME[op]}", file=sys.stderr)
        return 1
    req = {"op": op, "child": args.child, "ike": args.ike}
    if op != "rekey":
        req["timeout"] = args.timeout or None
    # 5.9.8's rekey command registers no log callback: only the result line is printed
    return _stream(hd, req, op, show_log=op != "rekey")


def cmd_list_sas(hd: HostDir, args: argparse.Namespace) -> int:
    res = one(hd, {"op": "list_sas", "ike": args.ike, "child": args.child})
    if args.raw or args.pretty:
        for sa in res["sas"]:
            body = vici_sa(sa)
            if args.pretty:
                print("\n".join(_pretty("list-sa event", body)))
            else:
                print(f"list-sa event {{{vici_raw(body)}}}")
        print("list-sas reply {\n}" if args.pretty else "list-sas reply {}")
        return 0
    sys.stdout.write(format_list_sas(res["sas"]))
    return 0


def cmd_list_conns(hd: HostDir, args: argparse.Namespace) -> int:
    res = one(hd, {"op": "list_conns"})
    sys.stdout.write(format_list_conns(res["conns"]))
    return 0


def cmd_stats(hd: HostDir, args: argparse.Namespace) -> int:
    res = one(hd, {"op": "status"})
    up = int(res.get("uptime", 0))
    print(f"uptime: {up} seconds")
    print(f"worker threads: 16 total, 11 idle, working: 4/0/1/0")
    print(f"job queues: 0/0/0/0")
    print(f"jobs scheduled: 0")
    print(f"IKE_SAs: {res.get('ike_sas', 0)} total, 0 half-open")
    return 0


HANDLERS = {"load-all": cmd_load_all, "initiate": partial(_named_op, "initiate"),
            "terminate": cmd_terminate, "rekey": partial(_named_op, "rekey"), "list-sas": cmd_list_sas, "list-conns": cmd_list_conns, "stats": cmd_stats}


def _parser(cmd: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="swanctl", add_help=False)
    ap.add_argument("--raw", "-r", action="store_true")
    ap.add_argument("--pretty", "-P", action="store_true")
    ap.add_argument("--debug", "-v", type=int, default=1)
    ap.add_argument("--uri", "-u")
    if cmd == "load-all":
        ap.add_argument("--noprompt", "-n", action="store_true")
        ap.add_argument("--clear", "-c", action="store_true")
        ap.add_argument("--file", "-f")
    else:
        ap.add_argument("--child", "-c")
        ap.add_argument("--ike", "-i")
        ap.add_argument("--timeout", "-t", type=float, default=0)
        ap.add_argument("--force", "-f", action="store_true")
        ap.add_argument("--reauth", "-a", action="store_true")
        ap.add_argument("--loglevel", "-l", type=int, default=1)
        ap.add_argument("--noblock", "-n", action="store_true")
        ap.add_argument("--ike-id", "-I")
        ap.add_argument("--child-id", "-C")
    return ap


def usage(cmd: str | None) -> str:
    head = "strongSwan 5.9.8 swanctl\nusage:\n"
    if cmd:
        return head + USAGE[cmd] + "\n"
    return head + "".join(v + "\n" for v in USAGE.values())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write(usage(None))
        return 1
    cmd = COMMANDS[argv[0]]
    try:
        args = _parser(cmd).parse_args(argv[1:])
    except SystemExit:
        sys.stderr.write(usage(cmd))
        return 1
    try:
        hd = host_dir()
    except Exception as exc:
        print(f"swanctl: {exc}", file=sys.stderr)
        return 1
    try:
        return HANDLERS[cmd](hd, args)
    except Unreachable as exc:
        print(f"connecting to '{VICI_URI}' failed: {os.strerror(exc.err)}", file=sys.stderr)
        print(f"Error: connecting to 'default' URI failed: {os.strerror(exc.err)}", file=sys.stderr)
        sys.stderr.write(usage(cmd))
        return exc.err


if __name__ == "__main__":
    sys.exit(main())
