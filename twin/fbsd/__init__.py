"""FreeBSD 14 commands of the emulated appliance: `python -m twin.fbsd.<cmd>`.

Each module prints what FreeBSD prints (formats: shared/reference/freebsd-opnsense-formats.md),
with FreeBSD's exit codes and error texts, computed from the lab's real state: the ESP
engine (DIR/engine.sock), state.json, sysctl.json, faults.json and the namespace's real
interfaces and routes. They run on every SSH command, so imports stay small (stdlib only).
"""
