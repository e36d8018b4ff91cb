"""Run a module as `python -m MODULE ARGS` would, in an interpreter that is already warm.

Why: starting an interpreter and importing the twin's modules costs 0.06-0.29 s of CPU
per process (the engine's control process 0.29, the SSH server 0.16, the IKE daemon 0.12;
measured 12-04), and the twin starts many: a command per SSH request (ipsec_hil_twin.shell.cmdserver forks
for each) and nine components per lab (ipsec_hil_twin.machinery.prefork). A process forked from one that has
imported them already skips that; what it must still do is what the interpreter does
around ``-m``: run the module as ``__main__`` with its argv, turn SystemExit into the exit
status, join non-daemon threads, run atexit handlers and flush -- here, so both users
behave as the program started by itself would.

Stdlib only: ipsec_hil_twin.shell.cmdserver runs with ``-S``.
"""
from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback


def exit_code(code: object) -> int:
    """SystemExit's argument as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:  # noqa: BLE001 -- as the interpreter: a failing stderr loses the text
        pass
    return 1


def finish_interpreter(code: int, *, stop_threads: bool = True) -> int:
    """What the interpreter does before it exits: join non-daemon threads, run atexit,
    flush stdout and stderr (a flush that fails is exit status 120, as in CPython).

    ``stop_threads=False`` (a process that runs another module afterwards,
    ipsec_hil_twin.shell.cmdworker): threading is shut down only when a thread besides
    the main one is alive -- with none there is nothing to join, and a shut-down threading
    module (its main thread marked stopped) would be left for the next run."""
    threading = sys.modules.get("threading")
    if threading is not None and (stop_threads or threading.active_count() > 1):
        try:
            threading._shutdown()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    import atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 -- CPython: "Exception ignored ..." and status 120
            if code == 0:
                code = 120
    return code


def run_as_main(module: str, args: list[str], *, stop_threads: bool = True) -> int:
    """Run MODULE as `python -m MODULE ARGS` would, in this (forked) process; its exit
    status. A plain module runs fresh as ``__main__`` (as -m does: its cached import is
    dropped first); a package runs its ``__main__`` submodule, the package itself staying
    the one imported (a second copy of it would not hold its submodules).
    ``stop_threads``: :func:`finish_interpreter`'s."""
    loaded = sys.modules.get(module)
    if loaded is not None and not hasattr(loaded, "__path__"):
        sys.modules.pop(module, None)
    sys.modules.pop(f"{module}.__main__", None)
    sys.argv = [module, *args]  # runpy puts the module's file in argv[0]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        finish_interpreter(1)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # CPython dies of the SIGINT it caught
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 -- an uncaught exception: traceback, status 1
        traceback.print_exc()
        code = 1
    return finish_interpreter(code, stop_threads=stop_threads)
