"""Write DIR/bin/<cmd> wrappers so the appliance shell finds FreeBSD's commands first.

One wrapper per entry of the registry ipsec_hil_twin.fbsd.COMMANDS.

A `stdlib` command's wrapper is a Perl script: it hands its command to the appliance's
command server by running twin/ipsec_hil_twin/shell/cmdclient.pl in its own interpreter, or execs
`PYTHON -S -m <module> "$@"` itself. Why Perl, not `#!/bin/sh` exec'ing perl: the shell was
one exec more per emulated command (0.8 ms of a served command's 7 ms of machine CPU,
issue 15), and the command keeps its own name in ps (the kernel names a script's process
after the script). A `full` command's wrapper is `#!/bin/sh` exec'ing Python. TWIN_HOST_DIR
is already in the environment (ipsec_hil_twin.shell.sshd sets it), but a wrapper sets it too when missing
so a wrapper run by hand from the host dir still works.

PERL_BADLANG=0 (the sh wrapper's guard against perl's warning about a locale that is not
installed) cannot be given to a perl that is the script's interpreter: it is read before
the script. The appliance's commands run with LANG=C.UTF-8 (ipsec_hil_twin.shell.sshd_exec.appliance_env,
which takes no environment from the client), a locale every glibc has built in.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from ipsec_hil_twin import SOURCE_ROOT
from ipsec_hil_twin.fbsd import COMMANDS, Command
from ipsec_hil_twin.machinery.runtime import HostDir


def _dq(text: str) -> str:
    """Escape for the inside of a double-quoted sh word."""
    return "".join("\\" + ch if ch in '\\"$`' else ch for ch in text)


REPO_ROOT = SOURCE_ROOT
"""Where the `ipsec_hil_twin` package lives; put on PYTHONPATH so the commands can skip site."""


NO_SERVER_ENV = "TWIN_NO_COMMAND_SERVER"
"""Set to 1 in the appliance shell: the wrappers start their commands themselves."""


PERL = "/usr/bin/perl"
"""perl-base: Essential on Debian, so on every machine the lab runs on (tools/setup lists it
all the same)."""
CLIENT = SOURCE_ROOT / "ipsec_hil_twin" / "shell" / "cmdclient.pl"
"""The command server's client the wrappers run (ipsec_hil_twin.shell.cmdclient says why Perl)."""


def _pq(text: str) -> str:
    """A single-quoted Perl string of ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def wrapper_text(command: Command, host_dir: HostDir, python: str) -> str:
    """The wrapper script: sets TWIN_HOST_DIR when missing, then runs the module as the
    registry says (`stdlib`: `python -S` with the repository on PYTHONPATH). A `stdlib`
    command goes to the appliance's command server while its socket exists (the SSH
    server runs one, ipsec_hil_twin.shell.cmdserver: the same run, without an interpreter's start-up);
    without one -- a host dir used by hand, a lab without SSH -- or with NO_SERVER_ENV=1 (to
    profile one command, or compare), the wrapper runs it."""
    if command.wrapper == "stdlib":
        sock = host_dir.cmd_sock.name
        return "\n".join([
            f"#!{PERL}",
            f"# ipsec_hil_twin.fbsd.install: runs {command.module} on the appliance's command server, or itself",
            "use strict;",
            f"$ENV{{TWIN_HOST_DIR}} = {_pq(str(host_dir.path))} unless length($ENV{{TWIN_HOST_DIR}} // '');",
            f"$ENV{{PYTHONPATH}} = {_pq(str(REPO_ROOT))} . (length($ENV{{PYTHONPATH}} // '') ? \":$ENV{{PYTHONPATH}}\" : '');",
            f"my $sock = $ENV{{TWIN_HOST_DIR}} . {_pq('/' + sock)};",
            f"if (($ENV{{{NO_SERVER_ENV}}} // '') ne '1' && -S $sock) {{",
            f"    @ARGV = ($sock, {_pq(command.module)}, @ARGV);",
            f"    do {_pq(str(CLIENT))};  # exits with the command's status",
            f"    syswrite(STDERR, \"twin: {CLIENT.name}: \" . ($@ || $! || 'returned') . \"\\n\");",
            "    exit 126;",
            "}",
            f"exec {{ {_pq(python)} }} {_pq(python)}, '-S', '-m', {_pq(command.module)}, @ARGV;",
            f"syswrite(STDERR, 'twin: ' . {_pq(python)} . \": $!\\n\");",
            "exit 127;",
        ]) + "\n"
    if command.wrapper == "full":
        return "\n".join(["#!/bin/sh", f': "${{TWIN_HOST_DIR:={_dq(str(host_dir.path))}}}"', "export TWIN_HOST_DIR",
                          f'exec {shlex.quote(python)} -m {command.module} "$@"']) + "\n"
    raise ValueError(f"ipsec_hil_twin.fbsd.COMMANDS: {command.module}: wrapper {command.wrapper!r}, "
                     "expected 'stdlib' or 'full'")


def install_bin(host_dir: HostDir | str | os.PathLike[str], python: str = sys.executable) -> list[Path]:
    """Create/refresh every wrapper in DIR/bin (mode 755); returns their paths."""
    hd = host_dir if isinstance(host_dir, HostDir) else HostDir(host_dir)
    hd.bin.mkdir(parents=True, exist_ok=True)
    written = []
    for name, command in COMMANDS.items():
        p = hd.bin / name
        tmp = p.with_name(f".{name}.tmp")
        tmp.write_text(wrapper_text(command, hd, python))
        tmp.chmod(0o755)
        os.replace(tmp, p)
        written.append(p)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ipsec_hil_twin.fbsd.install HOST_DIR", file=sys.stderr)
        return 2
    for p in install_bin(args[0]):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
