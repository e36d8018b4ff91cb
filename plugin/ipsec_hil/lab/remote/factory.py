"""A Host for a topology host: its ``mgmt`` (or a jump host's) -> SshHost or LocalHost."""

from __future__ import annotations

import os

from ipsec_hil.lab.errors import HostKeyError, TransportError
from ipsec_hil.lab.remote.local import LocalHost
from ipsec_hil.lab.remote.ssh import SshHost
from ipsec_hil.lab.topology import Jump, Mgmt


def host_from_mgmt(name: str, mgmt: Mgmt | Jump, known_hosts: str | os.PathLike[str] | None,
                   jump: SshHost | None = None) -> SshHost | LocalHost:
    """Build a Host from a topology :class:`Mgmt` (or a :class:`Jump`, always SSH).

    ``jump`` is the already built SshHost for ``mgmt.jump`` (the caller resolves names to
    hosts). A jump host has no timeouts of its own in the file: it gets the defaults.
    """
    if isinstance(mgmt, Mgmt) and mgmt.local:
        return LocalHost(name, netns=mgmt.netns, command_timeout=mgmt.command_timeout)
    missing = [a for a in ("address", "key_file") if getattr(mgmt, a) in (None, "")]
    if missing:
        raise TransportError(f"{name}: mgmt lacks {', '.join(missing)} (need local: true or ssh fields)")
    if known_hosts is None:
        raise HostKeyError(f"{name}: no known_hosts file configured for the lab (lab.known_hosts)")
    if isinstance(mgmt, Mgmt) and mgmt.jump is not None and jump is None:
        raise TransportError(f"{name}: mgmt.jump={mgmt.jump!r} but no jump host was passed")
    timeouts = (mgmt.connect_timeout, mgmt.command_timeout) if isinstance(mgmt, Mgmt) else (10, 60)
    assert mgmt.address is not None and mgmt.key_file is not None
    return SshHost(name, mgmt.address, mgmt.port, mgmt.user, mgmt.key_file, known_hosts, jump=jump,
                   connect_timeout=timeouts[0], command_timeout=timeouts[1])
