"""swanctl.conf rendering, the tunnel transaction, bring-up and teardown.

One job per module: ``secret`` (the PSK that never shows itself), ``plan`` (a topology
tunnel resolved: ends, children, names, the file), ``render`` (swanctl.conf text and its
grammar check), ``changes`` (journalled route/interface changes, a teardown that
finishes), ``commands`` (every child initiated in one remote command; terminate by id or
forced), ``verify`` (where each child really lives on both ends, what a teardown left),
``terminate`` (a tunnel's SAs ended from the initiator and proven gone), ``provisioner``
(the transaction on both ends). See each module for the why; the names are fixed in ``plan``.

Secrets: the PSK travels as :class:`Secret`, whose repr/str are masked; it only appears in
the text :func:`render_swanctl` returns (written straight to the appliance) and never in a
log, an exception or a report (:func:`render_masked` is the report's version).
"""

from __future__ import annotations

from ipsec_hil.lab.provision.changes import HostChanges, Teardown, Undo
from ipsec_hil.lab.provision.plan import (
    CONF_DIR,
    PROPOSALS,
    ChildPlan,
    EndPlan,
    TunnelPlan,
    check_config,
    child_plans,
    conf_path,
    conn_name,
)
from ipsec_hil.lab.provision.provisioner import INCLUDE_LINE, SWANCTL_CONF, BringUp, TunnelProvisioner
from ipsec_hil.lab.provision.render import check_grammar, render_masked, render_swanctl
from ipsec_hil.lab.provision.secret import MASK, Secret, as_secret

__all__ = [
    "CONF_DIR", "SWANCTL_CONF", "INCLUDE_LINE", "MASK", "PROPOSALS",
    "Secret", "as_secret",
    "EndPlan", "TunnelPlan", "ChildPlan", "check_config", "conn_name", "child_plans", "conf_path",
    "render_swanctl", "render_masked", "check_grammar",
    "BringUp", "Undo", "HostChanges", "Teardown", "TunnelProvisioner",
]
