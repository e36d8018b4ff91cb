"""Launcher: run a program the way the emulated appliance would, then exec it.

`python -m ipsec_hil_twin.machinery.nsexec --host-dir DIR [--netns NS] -- PROGRAM ARG...`

Why a separate process: the SSH server is multi-threaded and lives in the root
namespace; entering another network namespace and a private mount namespace must
happen in a fresh single-threaded process right before `execve`, so it is done
here (ctypes on libc) rather than in a `preexec_fn`.

Steps, in order:
1. `setns(/run/netns/NS, CLONE_NEWNET)` when a namespace is given;
2. `unshare(CLONE_NEWNS)` and make every mount private (nothing leaks back);
3. remount /sys for the new network namespace (as `ip netns exec` does), best effort;
4. bind-mount the appliance paths from DIR/root over the real ones:
   /usr/local/etc, /boot, /var/db, /var/log (see DESIGN.md "The virtual lab at run time");
5. chdir to $HOME and execve the program with the caller's environment.
"""
from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

APPLIANCE_MOUNTS: tuple[str, ...] = ("/usr/local/etc", "/boot", "/var/db", "/var/log", "/root", "/tmp")
"""Appliance paths whose contents come from DIR/root/<path> (shared with SFTP).

/root (root's home, where csh's `2>&1` leaves its file `1`) and /tmp are per appliance
too, so two emulated appliances (or the host) never see each other's scratch files."""

EXIT_SETUP_FAILED = 126
"""Exit status when the namespace cannot be entered (the command never ran)."""

_libc = ctypes.CDLL("libc.so.6", use_errno=True)  # glibc (Debian); ctypes.util costs 35 ms


class NsExecError(RuntimeError):
    """Entering the appliance's namespaces failed (message names the step).

    Not a ipsec_hil_twin.errors.TwinError: this file runs as a script with `-I -S` (see
    launcher_argv) and imports nothing from the twin package.
    """


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise NsExecError(f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int) -> None:
    ret = _libc.mount(
        src.encode() if src else None,
        dst.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        None,
    )
    _check(ret, f"mount {src or '-'} -> {dst}")


def enter_netns(netns: str) -> None:
    """Join the named network namespace (the file `ip netns add` created)."""
    path = f"/run/netns/{netns}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NsExecError(f"open {path}: {exc.strerror}") from None
    try:
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns {path}")
    finally:
        os.close(fd)


MS_RDONLY = 1
MS_SLAVE = 1 << 19
ETC_NETNS = "/etc/netns"


def ip_netns_exec_view(netns: str) -> None:
    """What `ip netns exec NS` does before it execs (iproute2 lib/namespace.c netns_switch):
    join the namespace; a mount namespace of our own that the host's mounts still reach
    and ours never leave (rslave); /sys remounted so it shows this namespace (read-only
    when the old one was); every entry of /etc/netns/NS bound over /etc's (bind_etc).
    For the lab's components forked from the supervisor (ipsec_hil_twin.machinery.prefork) instead of
    started through `ip netns exec`; the appliance's command view is :func:`enter`."""
    enter_netns(netns)
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount("", "/", "none", MS_SLAVE | MS_REC)
    flags = 0
    if _libc.umount2(b"/sys", MNT_DETACH) != 0 and os.statvfs("/sys").f_flag & os.ST_RDONLY:
        flags = MS_RDONLY
    _mount(netns, "/sys", "sysfs", flags)
    etc = os.path.join(ETC_NETNS, netns)
    try:
        entries = sorted(os.listdir(etc))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in entries:
        try:  # ip warns and goes on
            _mount(os.path.join(etc, name), os.path.join("/etc", name), "none", MS_BIND)
        except NsExecError as exc:
            print(f"Bind {etc}/{name} -> /etc/{name} failed: {exc}", file=sys.stderr)


def private_mounts(host_dir: str | os.PathLike[str], netns: str | None) -> None:
    """New mount namespace with DIR/root's appliance paths bound over the real ones."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if netns:
        # /sys shows the network namespace of whoever mounted it; ip netns exec does the same.
        if _libc.umount2(b"/sys", MNT_DETACH) == 0:
            try:
                _mount(netns, "/sys", "sysfs", 0)
            except NsExecError:
                pass
    root = os.path.join(os.fspath(host_dir), "root")
    keep = keep_visible(host_dir)
    for target in APPLIANCE_MOUNTS:
        src = os.path.join(root, target.lstrip("/"))
        if not os.path.isdir(src):
            os.makedirs(src, exist_ok=True)
            if target == "/tmp":
                os.chmod(src, 0o1777)
        # Debian has no /var/db: create the (empty) mount point once; harmless on the host.
        os.makedirs(target, exist_ok=True)
        # Host paths under target that must stay reachable (the host dir in a test's /tmp,
        # the Python behind the venv under /root/.pyenv): hold them open, re-bind after.
        subs = sorted({target + "/" + k[len(target) + 1:].split("/")[0]
                       for k in keep if k.startswith(target + "/")})
        held = [(s, os.open(s, os.O_PATH | os.O_CLOEXEC)) for s in subs if os.path.exists(s)]
        try:
            _mount(src, target, None, MS_BIND | MS_REC)
            for s, fd in held:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(s, exist_ok=True)
                elif not os.path.exists(s):
                    open(s, "a").close()
                _mount(f"/proc/self/fd/{fd}", s, None, MS_BIND | MS_REC)
        finally:
            for _, fd in held:
                os.close(fd)


def keep_visible(host_dir: str | os.PathLike[str]) -> list[str]:
    """Host paths the appliance's commands need even where an appliance mount covers them."""
    # ...and the directory holding the ipsec_hil_twin package (its components run with it
    # on PYTHONPATH): a checkout under /root or /tmp is otherwise covered by the appliance's own
    # /root or /tmp, and its command server fails with "No module named 'ipsec_hil_twin'".
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    paths = {os.path.realpath(host_dir), os.path.abspath(sys.executable), os.path.realpath(sys.executable),
             os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), package_root}
    return sorted(paths)


def enter(host_dir: str | os.PathLike[str], netns: str | None) -> None:
    """Do steps 1-4 in the current (single-threaded) process."""
    if netns:
        enter_netns(netns)
    private_mounts(host_dir, netns)


def launcher_argv(
    host_dir: str | os.PathLike[str],
    netns: str | None,
    argv: list[str],
    *,
    argv0: str | None = None,
    python: str | None = None,
) -> list[str]:
    """The argv that runs `argv` inside the appliance (ipsec_hil_twin.shell.sshd: its command server,
    which starts the shells and commands of every SSH request there).

    This file is run directly with `-I -S` (stdlib only, no site): importing nothing from
    the twin package keeps what runs before the namespaces are entered small.
    """
    cmd = [python or sys.executable, "-I", "-S", os.path.abspath(__file__), "--host-dir", str(host_dir)]
    if netns:
        cmd += ["--netns", netns]
    if argv0:
        cmd += ["--argv0", argv0]
    return cmd + ["--"] + list(argv)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    opts: dict[str, str] = {}
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt not in ("--host-dir", "--netns", "--argv0") or not args:
            print(f"ipsec_hil_twin.machinery.nsexec: unknown option {opt!r}", file=sys.stderr)
            return 2
        opts[opt] = args.pop(0)
    host_dir, netns, argv0 = opts.get("--host-dir"), opts.get("--netns") or None, opts.get("--argv0")
    if not args or args[0] != "--" or len(args) < 2 or not host_dir:
        print("usage: python -m ipsec_hil_twin.machinery.nsexec --host-dir DIR [--netns NS] [--argv0 NAME] -- PROGRAM ARG...",
              file=sys.stderr)
        return 2
    prog = args[1:]
    try:
        enter(host_dir, netns)
    except NsExecError as exc:
        print(f"ipsec_hil_twin.machinery.nsexec: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
    home = os.environ.get("HOME", "/")
    try:
        os.chdir(home)
    except OSError:
        os.chdir("/")
    exec_argv = [argv0 or prog[0]] + prog[1:]
    try:
        os.execvp(prog[0], exec_argv)
    except OSError as exc:
        print(f"ipsec_hil_twin.machinery.nsexec: exec {prog[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
