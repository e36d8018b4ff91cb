"""Write DIR/bin/<cmd> wrappers so the appliance shell finds FreeBSD's commands first.

One wrapper per entry of the registry twin.fbsd.COMMANDS.

Each wrapper is a `#!/bin/sh` script: it hands its command to the appliance's command
server through twin/cmdclient.pl, or runs `PYTHON -m <module> "$@"` itself. TWIN_HOST_DIR
is already in the environment (twin.sshd sets it), but the wrapper sets it too when missing
so a wrapper run by hand from the host dir still works.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from twin.fbsd import COMMANDS, Command
from twin.runtime import HostDir


def _dq(text: str) -> str:
    """Escape for the inside of a double-quoted sh word."""
    return "".join("\\" + ch if ch in '\\"$`' else ch for ch in text)


REPO_ROOT = Path(__file__).resolve().parents[2]
"""Where the `twin` package lives; put on PYTHONPATH so the commands can skip site."""


NO_SERVER_ENV = "TWIN_NO_COMMAND_SERVER"
"""Set to 1 in the appliance shell: the wrappers start their commands themselves."""


PERL = "/usr/bin/perl"
"""perl-base: Essential on Debian, so on every machine the lab runs on (tools/setup lists it
all the same)."""
CLIENT = REPO_ROOT / "twin" / "cmdclient.pl"
"""The command server's client the wrappers run (twin.cmdclient says why Perl)."""


def wrapper_text(command: Command, host_dir: HostDir, python: str) -> str:
    """The wrapper script: sets TWIN_HOST_DIR when missing, then execs the module as the
    registry says (`stdlib`: `python -S` with the repository on PYTHONPATH). A `stdlib`
    command goes to the appliance's command server while its socket exists (the SSH
    server runs one, twin.cmdserver: the same run, without an interpreter's start-up);
    without one -- a host dir used by hand, a lab without SSH -- or with NO_SERVER_ENV=1 (to
    profile one command, or compare), the wrapper runs it."""
    lines = ["#!/bin/sh", f': "${{TWIN_HOST_DIR:={_dq(str(host_dir.path))}}}"', "export TWIN_HOST_DIR"]
    if command.wrapper == "stdlib":
        root, py = shlex.quote(str(REPO_ROOT)), shlex.quote(python)
        lines += [f'PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}}', "export PYTHONPATH",
                  f'if [ "${{{NO_SERVER_ENV}:-}}" != 1 ] && [ -S "$TWIN_HOST_DIR/{host_dir.cmd_sock.name}" ]; then',
                  f'  PERL_BADLANG=0 exec {PERL} {shlex.quote(str(CLIENT))} "$TWIN_HOST_DIR/{host_dir.cmd_sock.name}" '
                  f'{command.module} "$@"',
                  "fi",
                  f'exec {py} -S -m {command.module} "$@"']
    elif command.wrapper == "full":
        lines.append(f'exec {shlex.quote(python)} -m {command.module} "$@"')
    else:
        raise ValueError(f"twin.fbsd.COMMANDS: {command.module}: wrapper {command.wrapper!r}, "
                         "expected 'stdlib' or 'full'")
    return "\n".join(lines) + "\n"


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
        print("usage: python -m twin.fbsd.install HOST_DIR", file=sys.stderr)
        return 2
    for p in install_bin(args[0]):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
