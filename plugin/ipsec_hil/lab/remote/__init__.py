"""Host transports: run POSIX sh scripts and move files on appliances and the bench.

One job per module: ``shell`` (the sh-on-stdin contract, RunResult, the Host protocol,
argv quoting), ``ssh`` (SshHost: one reused paramiko connection, pinned host keys),
``sftp`` (SshHost's files), ``local`` (LocalHost, optionally in a netns), ``factory``
(a Host for a topology host's ``mgmt``). Library code: no pytest import.
"""

from __future__ import annotations

from ipsec_hil.lab.remote.factory import host_from_mgmt
from ipsec_hil.lab.remote.local import LocalHost
from ipsec_hil.lab.remote.shell import SH_COMMAND, CommandFailed, Host, RunResult, argv, script
from ipsec_hil.lab.remote.ssh import SshHost

__all__ = ["SH_COMMAND", "CommandFailed", "Host", "RunResult", "argv", "script", "SshHost", "LocalHost",
           "host_from_mgmt"]
