"""swanctl.conf for one end of one tunnel config, in strongSwan's grammar, and its check.

One ``key = value`` per line, balanced braces, values quoted only when they must be:
:func:`check_grammar` verifies every rendered text before it can reach an appliance. The
PSK appears only in the text :func:`render_swanctl` returns (written straight to the
appliance); :func:`render_masked` is the version for reports and logs.
"""

from __future__ import annotations

import base64
import re

from ipsec_hil.lab.errors import ProvisionError
from ipsec_hil.lab.provision.plan import PROPOSALS, TunnelPlan, check_config, child_plans, conn_name
from ipsec_hil.lab.provision.secret import MASK, Secret, as_secret
from ipsec_hil.lab.topology import TunnelConfig

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:/@%\[\]-]+$")


def _value(v: str) -> str:
    """A value as strongSwan's settings parser reads it: bare if simple, else quoted."""
    if _SAFE_VALUE.match(v):
        return v
    if any(c in v for c in '"\\\n\r') or not v.isprintable():
        raise ProvisionError(f"value {v!r} cannot be written into swanctl.conf safely")
    return f'"{v}"'


def _secret_value(psk: Secret) -> str:
    """The PSK as swanctl.conf takes it: quoted when printable and quote-free, else ``0s`` base64."""
    v = psk.reveal()
    if v.isprintable() and v.isascii() and '"' not in v and "\\" not in v:
        return f'"{v}"'
    return "0s" + base64.b64encode(v.encode("utf-8")).decode("ascii")


def _ts(net: str, proto_port: str | None) -> str:
    return f"{net}[{proto_port}]" if proto_port else net


def render_swanctl(tunnel: TunnelPlan, config: TunnelConfig, end: str, psk: Secret | str | bytes | None) -> str:
    """swanctl.conf text for one end (``"local"`` or ``"remote"``) of one tunnel config.

    ``psk=None`` renders the masked text (see :func:`render_masked`). The text has one
    ``key = value`` per line and balanced braces; :func:`check_grammar` verifies both.
    """
    check_config(config)
    outer, inner, cipher = config.outer, config.inner, config.cipher
    me, peer = tunnel.end(end), tunnel.other(end)
    ike_prop, esp_prop, _ = PROPOSALS[cipher]
    conn = conn_name(tunnel, config)
    if tunnel.identities is None:
        my_id, peer_id = me.outer_addr(outer), peer.outer_addr(outer)
    else:
        lid, rid = tunnel.identities
        my_id, peer_id = (lid, rid) if end == "local" else (rid, lid)
    secret_text = MASK if psk is None else _secret_value(as_secret(psk))

    out: list[str] = []
    w = out.append
    w(f"# Written by the IPsec HIL suite for tunnel {tunnel.name} ({end} end: {me.host}).")
    w("# Restored/removed at teardown; OPNsense keeps conf.d across its swanctl.conf rewrites.")
    w("connections {")
    w(f"    {conn} {{")
    w("        version = 2")
    w(f"        local_addrs = {_value(me.outer_addr(outer))}")
    w(f"        remote_addrs = {_value(peer.outer_addr(outer))}")
    w(f"        proposals = {ike_prop}")
    if tunnel.encap:  # RFC 3948 forced on both ends: fake NAT detection, ESP in UDP 4500
        w("        encap = yes")
    w("        local {")
    w("            auth = psk")
    w(f"            id = {_value(my_id)}")
    w("        }")
    w("        remote {")
    w("            auth = psk")
    w(f"            id = {_value(peer_id)}")
    w("        }")
    w("        children {")
    for child in child_plans(tunnel, config):
        if child.port is None:
            my_sel = peer_sel = None
        else:  # the port is the server's, on the remote end's LAN
            my_sel = f"tcp/{child.port}" if end == "remote" else "tcp"
            peer_sel = f"tcp/{child.port}" if end == "local" else "tcp"
        w(f"            {child.name} {{")
        w(f"                local_ts = {_ts(me.lan_net(inner), my_sel)}")
        w(f"                remote_ts = {_ts(peer.lan_net(inner), peer_sel)}")
        w(f"                esp_proposals = {esp_prop}{'-esn' if tunnel.esn else ''}")
        w("                mode = tunnel")
        w("                start_action = none")
        if tunnel.replay_window is not None:
            w(f"                replay_window = {tunnel.replay_window}")
        if tunnel.lifetimes is not None:  # the topology's, for the rekey tests (seconds)
            for key, seconds in tunnel.lifetimes.for_end(end).items():
                w(f"                {key} = {seconds}s")
        w("            }")
    w("        }")
    w("    }")
    w("}")
    w("secrets {")
    w(f"    ike-{conn} {{")
    w(f"        id-1 = {_value(my_id)}")
    w(f"        id-2 = {_value(peer_id)}")
    w(f"        secret = {secret_text}")
    w("    }")
    w("}")
    text = "\n".join(out) + "\n"
    check_grammar(text)
    return text


def render_masked(tunnel: TunnelPlan, config: TunnelConfig, end: str, psk: Secret | str | bytes | None = None) -> str:
    """The same text with the secret replaced by ``<masked>`` (for reports and logs)."""
    return render_swanctl(tunnel, config, end, None)


_KEY_LINE = re.compile(r'^[A-Za-z0-9_.-]+ = ("[^"\n]*"|[^\s"{}#=][^\s"{}#]*)$')
_OPEN_LINE = re.compile(r"^[A-Za-z0-9_.-]+ \{$")


def check_grammar(text: str, source: str = "<rendered>") -> None:
    """strongSwan-grammar sanity: one ``key = value`` per line, sections balanced.

    Raises ProvisionError naming ``source:line`` -- it runs on every rendered text before
    it can reach an appliance.
    """
    depth = 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "}":
            depth -= 1
            if depth < 0:
                raise ProvisionError(f"{source}:{no}: unbalanced '}}'")
        elif _OPEN_LINE.match(line):
            depth += 1
        elif line.startswith("include "):
            if depth:
                raise ProvisionError(f"{source}:{no}: include inside a section")
        elif _KEY_LINE.match(line):
            if depth == 0:
                raise ProvisionError(f"{source}:{no}: key outside any section: {line.split(' ')[0]}")
        else:
            key = line.split("=")[0].strip()[:40]
            raise ProvisionError(f"{source}:{no}: not one 'key = value' per line (near {key!r})")
    if depth != 0:
        raise ProvisionError(f"{source}: {depth} section(s) not closed")


