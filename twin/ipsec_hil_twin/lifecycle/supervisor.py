"""The lab's supervisor: the long-lived process that owns a running virtual lab.

Why a separate process: `python -m ipsec_hil_twin up` must return (the suite goes on to use the
lab) while the engines, IKE daemons and SSH servers keep running; and those die with
their parent (PR_SET_PDEATHSIG), so a crash never leaves orphans serving stale state.
The supervisor is single-threaded on purpose: PDEATHSIG fires when the *thread* that
forked a child exits, so every child is started from the main thread.

It answers on RUN/supervisor.sock, one JSON object per line each way:
  {"op":"reboot","host":NAME[,"wait":true]} -> {"ok":true,"accepted":true} at once (the
      requester is usually a shell on that very appliance, which is about to go away),
      or with "wait": {"ok":true,"boot_id":N} after the host is back;
  {"op":"status"} -> {"ok":true,"status":{...}};
  {"op":"down"}   -> {"ok":true}, then teardown and exit.
SIGTERM/SIGINT tear the lab down; so does the owner process (`--owner-pid`, e.g. the
pytest run that asked for the lab) disappearing.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ipsec_hil_twin.lifecycle.lab import Lab, LabBuildError, alive, find_run, kill_record, pid_record, teardown, _free_prefix, cleanup_dead
from ipsec_hil_twin import jsonl
from ipsec_hil_twin.machinery.labprocs import name_process
from ipsec_hil_twin.faults import active_faults, clear_fault
from ipsec_hil_twin.fbsd import _kmem
from ipsec_hil_twin.errors import ControlSocketError
from ipsec_hil_twin.machinery.runtime import RunDir, check_prefix, read_json


REBOOT_GRACE = 0.5
"""Seconds between accepting a fire-and-forget reboot and stopping the host."""


class Supervisor:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.stop = False
        self.pending: list[tuple[str, socket.socket | None]] = []
        self._wake: tuple[int, int] | None = None
        self._pid = os.getpid()
        self._reboot_base: dict[str, int] = {}  # fault silent_reboot: host -> packets when first seen

    def install_signals(self) -> None:
        """From now on SIGTERM/SIGINT/SIGHUP mean: stop serving, tear down."""
        if getattr(self, "_wake", None) is None:
            rfd, wfd = os.pipe()
            os.set_blocking(wfd, False)
            os.set_blocking(rfd, False)
            self._wake = (rfd, wfd)
            self._old_wakeup = signal.set_wakeup_fd(wfd)
            self._prev = {s: signal.signal(s, self._on_signal)
                          for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}

    def serve(self) -> None:
        """Run until SIGTERM/SIGINT, a `down` request or the owner's death; then tear down."""
        self.install_signals()
        rfd, wfd = self._wake
        old, prev = self._old_wakeup, self._prev
        sock_path = self.lab.run.supervisor_sock
        sock_path.unlink(missing_ok=True)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(sock_path))
        srv.listen(16)
        owner = self.lab.info.get("owner")
        try:
            while not self.stop:
                try:
                    ready, _, _ = select.select([srv, rfd], [], [], 1.0)
                except InterruptedError:
                    continue
                if rfd in ready:
                    try:
                        os.read(rfd, 512)
                    except BlockingIOError:
                        pass
                if srv in ready:
                    self._accept(srv)
                while self.pending and not self.stop:
                    host, conn = self.pending.pop(0)
                    self._do_reboot(host, conn)
                self._silent_reboots()
                if owner and not alive(owner):
                    self._log(f"owner pid {owner.get('pid')} is gone: tearing down")
                    self.stop = True
                self._reap_children()
        finally:
            srv.close()
            self._log("tearing down")
            self.lab.down()
            signal.set_wakeup_fd(old)
            for s, h in prev.items():
                signal.signal(s, h)
            os.close(rfd)
            os.close(wfd)
            self._wake = None

    def _silent_reboots(self) -> None:
        """Fault `silent_reboot`: an appliance reboots by itself once, under traffic -- when
        `packets` packets have passed its engine since this loop first saw the fault (which
        is then switched off, so it happens once).  Traffic, not time, so a test's bring-up
        never trips it and its stream always does."""
        for host in self.lab.appliances():
            hd = self.lab.host_dir(host)
            params = active_faults(hd).get("silent_reboot")
            if params is None:
                self._reboot_base.pop(host, None)
                continue
            driver = hd.read_host().get("driver")
            packets = _kmem.traffic(hd, driver, sample=0).packets
            base = self._reboot_base.setdefault(host, packets)
            if packets - base >= int(params.get("packets", 50)):
                del self._reboot_base[host]
                clear_fault(self.lab.host_dir(host), "silent_reboot")
                self._log(f"{host}: fault silent_reboot: rebooting by itself")
                self._do_reboot(host, None)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if os.getpid() != self._pid:
            _default_action(signum)
        self.stop = True

    def _log(self, msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} supervisor {self.lab.prefix}: {msg}", file=sys.stderr, flush=True)

    def _reap_children(self) -> None:
        for comp in list(self.lab.components.values()):
            if comp.proc is not None and comp.proc.poll() is not None and not getattr(comp, "_reported", False):
                self._log(f"{comp.host}: {comp.name} exited with status {comp.proc.returncode}")
                comp._reported = True  # type: ignore[attr-defined]

    def _accept(self, srv: socket.socket) -> None:
        conn, _ = srv.accept()
        conn.settimeout(2.0)
        try:
            req = jsonl.decode(jsonl.read_line(conn) or b"{}", str(self.lab.run.supervisor_sock))
            op = req.get("op")
            if op == "reboot":
                host = req.get("host")
                if host not in self.lab.appliances():
                    self._reply(conn, {"ok": False, "error": f"unknown appliance {host!r}"})
                elif req.get("wait"):
                    self.pending.append((host, conn))
                    return  # answered after the reboot
                else:
                    self._reply(conn, {"ok": True, "accepted": True})
                    self.pending.append((host, None))
            elif op == "status":
                self._reply(conn, {"ok": True, "status": self.lab.status()})
            elif op == "down":
                self._reply(conn, {"ok": True})
                self.stop = True
            else:
                self._reply(conn, {"ok": False, "error": f"unknown op {op!r}; known: reboot, status, down"})
        except (OSError, ValueError) as exc:
            self._reply(conn, {"ok": False, "error": f"bad request: {exc}"})
        conn.close()

    def _reply(self, conn: socket.socket, obj: dict[str, Any]) -> None:
        failed = jsonl.send(conn, obj)
        if failed is not None:
            self._log(f"a requester left before its answer (ok={obj.get('ok')}): {failed!r}")

    def _do_reboot(self, host: str, conn: socket.socket | None) -> None:
        self._log(f"{host}: reboot")
        if conn is None:
            # asked from the appliance itself (`shutdown -r now`): let that command finish
            # and its exit status reach the SSH client before the server goes, as on hardware
            time.sleep(REBOOT_GRACE)
        try:
            boot_id = self.lab.reboot(host)
            answer = {"ok": True, "boot_id": boot_id}
            self._log(f"{host}: back, boot_id {boot_id}")
        except Exception as exc:  # report, keep the rest of the lab running
            answer = {"ok": False, "error": f"{host}: reboot failed: {exc}"}
            self._log(answer["error"])
        if conn is not None:
            self._reply(conn, answer)
            conn.close()


def _default_action(signum: int) -> None:
    """In a forked child that inherited our handlers (pyroute2 forks helpers and stops
    them with SIGTERM), behave as if no handler were installed: die of the signal."""
    signal.set_wakeup_fd(-1)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def request(run: RunDir, obj: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """Send one request to a lab's supervisor and return its answer."""
    try:
        return jsonl.request(run.supervisor_sock, obj, timeout)
    except ControlSocketError as exc:
        raise LabBuildError(f"supervisor: {exc}") from None


def request_reboot(run: RunDir, host: str, wait: bool = True, timeout: float = 60.0) -> dict[str, Any]:
    reply = request(run, {"op": "reboot", "host": host, "wait": wait}, timeout=timeout)
    if not reply.get("ok"):
        raise LabBuildError(reply.get("error", "reboot failed"))
    return reply


def spawn(topology: str, prefix: str | None = None, run_dir: str | None = None,
          components: list[str] | None = None, owner_pid: int | None = None,
          timeout: float = 90.0) -> dict[str, Any]:
    """Start a detached supervisor that builds the lab; return once the lab is up.

    Returns {"resolved", "prefix", "run_dir", "supervisor_pid"}; raises LabBuildError with
    the supervisor's reason when the build failed.
    """
    cleanup_dead()
    prefix = check_prefix(prefix) if prefix else _free_prefix()
    rd = RunDir(run_dir) if run_dir else RunDir.for_prefix(prefix)
    if rd.lab_json.exists():
        raise LabBuildError(f"prefix {prefix}: a lab with this prefix exists ({rd.path})")
    rd.path.mkdir(parents=True, exist_ok=True)
    r, w = os.pipe()
    argv = [sys.executable, "-m", "ipsec_hil_twin.lifecycle.supervisor", "--topology", str(Path(topology).resolve()),
            "--prefix", prefix, "--run-dir", str(rd.path), "--ready-fd", str(w),
            "--starter-pid", str(os.getpid())]
    if components is not None:
        argv += ["--components", ",".join(components)]
    if owner_pid:
        argv += ["--owner-pid", str(owner_pid)]
    log = open(rd.supervisor_log, "ab")
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                pass_fds=(w,), start_new_session=True, close_fds=True)
    finally:
        log.close()
        os.close(w)
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                kill_record(pid_record(proc.pid))
                raise LabBuildError(f"lab {prefix}: not up after {timeout:.0f} s (supervisor killed); "
                                    f"log {rd.supervisor_log}")
            ready, _, _ = select.select([r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                buf += chunk
    finally:
        os.close(r)
    if not buf:
        proc.wait(timeout=5)
        tail = ""
        try:
            tail = "\n".join(rd.supervisor_log.read_text(errors="replace").splitlines()[-15:])
        except FileNotFoundError:
            pass
        _remove_if_only_log(rd)
        raise LabBuildError(f"lab {prefix}: supervisor exited ({proc.returncode}) before the lab was up:\n{tail}")
    answer = json.loads(buf)
    if not answer.get("ok"):
        proc.wait(timeout=30)
        _remove_if_only_log(rd)
        raise LabBuildError(answer.get("error", "lab build failed"))
    return {k: answer[k] for k in ("resolved", "prefix", "run_dir", "supervisor_pid")}


def _remove_if_only_log(rd: RunDir) -> None:
    """A failed `up` leaves nothing: the run dir spawn() made holds only the log then
    (whose useful part the error message already carries)."""
    try:
        if {p.name for p in rd.path.iterdir()} <= {rd.supervisor_log.name}:
            rd.supervisor_log.unlink(missing_ok=True)
            rd.path.rmdir()
    except OSError:
        pass


def down(run_dir: str | None = None, prefix: str | None = None, timeout: float = 20.0) -> str:
    """Stop one lab: SIGTERM its supervisor, wait, then make sure nothing is left."""
    rd = find_run(run_dir=run_dir, prefix=prefix)
    info = read_json(rd.lab_json, default={}) or {}
    sup = info.get("supervisor")
    if alive(sup):
        os.kill(int(sup["pid"]), signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive(sup) and time.monotonic() < deadline:
            time.sleep(0.05)
        kill_record(sup, timeout=1.0)
    teardown(rd, info.get("prefix") or rd.path.name, info)
    return info.get("prefix") or rd.path.name


def run(topology: str, prefix: str, run_dir: str | None, components: list[str] | None,
        starter_pid: int | None, owner_pid: int | None, ready_fd: int | None) -> int:
    """Build the lab in this process, report readiness, serve until told to stop."""
    def report(obj: dict[str, Any]) -> None:
        line = json.dumps(obj) + "\n"
        if ready_fd is None:
            if obj.get("ok"):
                line = json.dumps({k: obj[k] for k in ("resolved", "prefix", "run_dir")}) + "\n"
            else:
                sys.stderr.write(f"twin: {obj.get('error')}\n")
                return
            sys.stdout.write(line)
            sys.stdout.flush()
        else:
            os.write(ready_fd, line.encode())
            os.close(ready_fd)

    me = os.getpid()

    def abort_build(signum: int, _frame: Any) -> None:
        if os.getpid() != me:
            _default_action(signum)
        raise KeyboardInterrupt(f"signal {signum} while building")

    # While building, SIGTERM/SIGINT/SIGHUP abort the build (Lab.up removes what it made);
    # afterwards they only set the supervisor's stop flag (installed before readiness is
    # reported, so a signal right after `up` returns is never lost).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, abort_build)
    try:
        lab = Lab.up(topology, prefix=prefix, run_dir=run_dir, components=components,
                     starter_pid=starter_pid, owner_pid=owner_pid, warm=True)
        sup = Supervisor(lab)
        sup.install_signals()
    except BaseException as exc:  # the starter prints the reason
        report({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    try:
        report({"ok": True, "resolved": str(lab.resolved), "prefix": lab.prefix,
                "run_dir": str(lab.run.path), "supervisor_pid": os.getpid()})
    except OSError as exc:  # the starter died while we built: nobody will ever use this lab
        print(f"supervisor {lab.prefix}: starter gone ({exc.strerror}); tearing down",
              file=sys.stderr, flush=True)
        lab.down()
        return 1
    sup.serve()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ipsec_hil_twin.lifecycle.supervisor")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--run-dir")
    ap.add_argument("--components")
    ap.add_argument("--starter-pid", type=int)
    ap.add_argument("--owner-pid", type=int)
    ap.add_argument("--ready-fd", type=int)
    a = ap.parse_args(argv)
    name_process("twin-supervisor")
    comps = [c for c in a.components.split(",") if c and c != "netns"] if a.components is not None else None
    return run(a.topology, a.prefix, a.run_dir, comps, a.starter_pid, a.owner_pid, a.ready_fd)


if __name__ == "__main__":
    sys.exit(main())
