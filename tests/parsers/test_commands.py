"""Each command the suite sends to an appliance is built in one place: its parser module's
``COMMAND`` (a :class:`ipsec_hil.lab.command.Command`), beside the parser, its result type
and its golden cases (issue 53, "a command is an object"); a command with no output to
parse (``swanctl --terminate``, ``route add``, ``kldload``, ``shutdown -r now``) in
ipsec_hil.lab.command itself.

The scan reads the suite's sources (the library, the plugin glue, the acceptance tests) for
a command line spelled outside its parser: a string that begins with a command's argv and
says more than the program's bare name (``"netstat -s -p esp --libxo json"``, ``f"kldstat -q
-n {m}"``, a ``check("swanctl --list-sas")`` label), or an argv list or call whose leading
constants begin with it (``argv("sysctl", "-n", oid)``, ``["route", "-n", "get", dst]``).
A program's bare name alone (a log label such as ``"dmesg"``) is not a command line.

The bench's programs too: iperf3 (``iperf3.CLIENT``/``SERVER``/``VERSION``; each run's
flags are its caller's, after the Command's argv), ping (``ipsec_hil.lab.ping_argv``, a
home: both programs' flags from one request, and the ping under load), iproute2's ``ip``
(``ip_route.BY_FAMILY``, ``command.IP_ROUTE``/``IP_ADDR``/``IP_NETNS_EXEC``), and the health
snapshot's text forms (``netstat_m.TEXT``, ...). A program any Command runs may not begin
an argv list or ``argv(...)`` of its own at all (``["iperf3", "-s", "-p", port]``: a new
spelling, whatever its flags), nor a string with an option after it (``f"ip -j addr show"``);
``[*iperf3.CLIENT.argv, addr, ...]`` builds on the home.
"""

from __future__ import annotations

import ast
import importlib
import shlex
from pathlib import Path

import pytest

from ipsec_hil.lab.command import Command, argv
from ipsec_hil.lab.parsers import MODULES

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "plugin" / "ipsec_hil" / "lab"
#: where command lines are built (the homes), not scanned
HOMES = (LAB / "parsers", LAB / "command.py", LAB / "ping_argv.py")
SOURCES = (REPO / "plugin" / "ipsec_hil", REPO / "tests_hil")


def commands() -> dict[tuple[str, ...], str]:
    """argv -> ``<module>.<NAME>`` of every Command a parser module defines, and of those
    ipsec_hil.lab.command builds itself (the commands whose answer is their exit status)."""
    out = {}
    for name in (*MODULES, "command"):
        mod = importlib.import_module(f"ipsec_hil.lab.parsers.{name}" if name != "command" else "ipsec_hil.lab.command")
        found = {f"{name}.{attr}": v for attr, v in vars(mod).items() if isinstance(v, Command)}
        found |= {f"{name}.{attr}[{k!r}]": c for attr, v in vars(mod).items() if isinstance(v, dict)
                  for k, c in v.items() if isinstance(c, Command)}
        out |= {c.argv: where for where, c in found.items()}
    return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))  # the longest match names it


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}


def spelled_commands(path: Path, known: dict[tuple[str, ...], str], base: Path = REPO) -> list[str]:
    """``file:line: 'text' is <parser>.COMMAND`` for each command line ``path`` spells itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = _docstrings(tree)
    said = {id(c) for r in ast.walk(tree) if isinstance(r, ast.Raise) for c in ast.walk(r)}
    hits = []
    programs: dict[str, list[str]] = {}
    for cmd, where in known.items():
        programs.setdefault(cmd[0], []).append(where)

    def check(tokens: list[str], node: ast.AST, quoting: bool = False, items: int = 0) -> None:
        """A command line: the command's argv and, for a bare program name, an option after it
        (``kldstat -q``; ``"dmesg"`` or ``"sysctl net.inet..."`` in prose is a name); any
        beginning at all given to the quoting itself (``argv("sysctl", *names)``). Then any
        program a Command runs: beginning an argv of ``items`` > 1 elements (a list, a
        tuple, ``argv(...)``) with anything after it, or a string with an option after it
        (``"iperf3 -s -p 5201"``, a flag set no Command has: a new spelling all the same).
        Not a label before a command (``("sysctl", sysctl.COMMAND(...))``: one constant) nor
        an error's words (``raise LoadError(f"iperf3 -u printed no JSON")``: prose)."""
        at = f"{path.relative_to(base)}:{node.lineno}: {' '.join(tokens)!r}"
        for cmd, where in known.items():
            if tuple(tokens[:len(cmd)]) == cmd and (
                    quoting or len(cmd) > 1 or (len(tokens) > 1 and tokens[1].startswith("-"))):
                hits.append(f"{at} is {where}")
                return
        homes = programs.get(tokens[0]) if tokens else None
        if homes and (items > 1 and (quoting or len(tokens) > 1) if items else
                      len(tokens) > 1 and tokens[1].startswith("-") and id(node) not in said):
            hits.append(f"{at} runs {tokens[0]}: build it from {', '.join(sorted(homes))}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            check(_tokens(node.value), node)  # an f-string's first part is a constant too
        elif isinstance(node, (ast.List, ast.Tuple, ast.Call)):
            items = node.elts if not isinstance(node, ast.Call) else node.args
            lead = []
            for item in items:
                if not (isinstance(item, ast.Constant) and isinstance(item.value, str)):
                    break
                lead.append(item.value)
            quoting = isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "argv", "Command")
            if lead and (quoting or not isinstance(node, ast.Call)):
                check(lead, node, quoting, len(items))
    return sorted(set(hits))


def test_every_parser_module_has_its_command():
    for name in MODULES:
        assert isinstance(importlib.import_module(f"ipsec_hil.lab.parsers.{name}").COMMAND, Command), name


def test_no_command_line_is_spelled_outside_its_parser():
    known = commands()
    assert known[("netstat", "-s", "-p", "esp", "--libxo", "json")] == "netstat_esp.COMMAND"
    files = [p for root in SOURCES for p in sorted(root.rglob("*.py"))
             if "__pycache__" not in p.parts and not any(p == h or h in p.parents for h in HOMES)]
    assert len(files) > 100
    hits = [h for p in files for h in spelled_commands(p, known)]
    assert not hits, "use the parser module's COMMAND (ipsec_hil.lab.command.Command):\n" + "\n".join(hits)


def test_the_scan_finds_each_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('"""kldstat -q -n in a docstring is prose"""\n'
                   'a = "netstat -s -p esp --libxo json"\n'
                   'b = f"kldstat -q -n {m}"\n'
                   'c = argv("sysctl", "-n", oid)\n'
                   'd = ["swanctl", "--list-sas"]\n'
                   'e = run("dmesg\\n", "dmesg")\n'
                   'f = ["swanctl", "--stats"]\n'
                   'g = Read("kldstat", kldstat.COMMAND, "kldstat")\n'
                   'h = f"sysctl net.inet.ipsec.offload.*: {n} leaves"\n'
                   'i = ["route", "-n", "get", dst]\n'
                   'j = argv("iperf3", "-s", "-p", port)\n'
                   'k = f"iperf3 -s -p {port}"\n'
                   'l = ("sysctl", sysctl.COMMAND(*oids))\n'
                   'm = [*iperf3.CLIENT.argv, addr, "-u", "--json"]\n'
                   'raise LoadError(f"iperf3 -u printed no JSON ({exc})")\n'
                   'p = ["ip", "-4", "route", "flush", "cache"]\n')
    assert {h.split(": ")[0] for h in spelled_commands(src, commands(), tmp_path)} == {
        "m.py:2", "m.py:3", "m.py:4", "m.py:5", "m.py:7", "m.py:10", "m.py:11", "m.py:12", "m.py:16"}


#: each line as the suite spelled it before it had a home (issue 53), and the home the
#: scan names: a sender that went back to spelling it would fail the scan
BEFORE = {
    '["iperf3", "-s", "-1", "--forceflush", "-p", port]': "iperf3.SERVER",
    '["iperf3", "-c", server, "-p", port, "-t", 10, "-P", streams, "--json"]': "iperf3.CLIENT",
    '["iperf3", "-c", addr, "-p", port, "-u", "-P", senders, "-l", size]': "iperf3.CLIENT",
    '("iperf3 --version", "apt-get install iperf3")': "iperf3.VERSION",
    'argv("ping", "-n", "-c", count, "-i", "0.05", addr)': "ping.COMMAND",
    '("ping -V", "apt-get install iputils-ping")': "ping.VERSION",
    '("ip -V", "apt-get install iproute2")': "command.IP_VERSION",
    '_run(bench.host, "ip -j addr show")': "command.IP_ADDR",
    'Read("ip6-route", "ip -j -6 route show")': "ip_route.BY_FAMILY['ipv6']",
    'subprocess.run(["ip", "-j", "-4", "route", "get", dst])': "ip_route.BY_FAMILY['ipv4']",
    'subprocess.run(["ip", "-6", "route", "add", net, "via", gw])': "command.IP_ROUTE['ipv6']",
    '["ip", "netns", "exec", self.netns, *sh]': "command.IP_NETNS_EXEC",
    '("netstat_m", netstat_m.COMMAND, "netstat -m")': "netstat_m.TEXT",
    '("vmstat_z", vmstat_z.COMMAND, "vmstat -z")': "vmstat_z.TEXT",
    '("vmstat_m", vmstat_m.COMMAND, "vmstat -m")': "vmstat_m.TEXT",
    '_run(app.host, "swanctl --stats")': "command.SWANCTL_STATS",
    'Read("swanctl-list-conns", "swanctl --list-conns")': "command.SWANCTL_LIST_CONNS",
    'argv("tcpdump", "--immediate-mode", "-n", "-U", "-s", str(snaplen), "-i", ifname)': "command.TCPDUMP_WRITE",
}


@pytest.mark.parametrize("line", BEFORE)
def test_each_old_spelling_is_found_naming_its_home(tmp_path, line):
    src = tmp_path / "sender.py"
    src.write_text(f"x = 1\ny = {line}\n")
    assert [h.split(": ", 1)[0] for h in spelled_commands(src, commands(), tmp_path)] == ["sender.py:2"]
    assert BEFORE[line] in spelled_commands(src, commands(), tmp_path)[0]


@pytest.mark.parametrize("args", [("sysctl", "-n", "kern.boottime"), ("ifconfig", "em0", "inet6", "2001:db8::1/64"),
                                  ("md5", "-q", "/boot/modules/it's here.ko"), ("x", 5)])
def test_a_command_is_its_quoted_line_and_keeps_its_argv(args):
    import pickle

    cmd = Command(*args)
    assert cmd == argv(*args) and cmd.argv == tuple(str(a) for a in args)
    assert cmd(7) == argv(*args, 7) and cmd(7).argv == (*cmd.argv, "7")
    assert pickle.loads(pickle.dumps(cmd)).argv == cmd.argv  # an exception carrying it crosses xdist
