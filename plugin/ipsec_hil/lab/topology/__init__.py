"""Topology files: YAML -> typed pydantic models, validated with ``FILE:LINE`` errors.

Why line numbers: a lab owner edits this file by hand, far from the code; an error must
say where (``topologies/real-lab.yaml:42: hosts.xgs136.ports.port8.mtu: expected ...,
found 9500``) and what to write instead, not dump a pydantic traceback.

How: the YAML is composed into nodes (``yaml.compose``), converted to plain data while
every mapping key, sequence item and value records its line; pydantic validates the
structure (``extra="forbid"``: an unknown key is an error at the key's line); then a
second pass checks what refers to what (links and tunnels naming hosts and ports that
exist, address families present where a tunnel needs them, duplicate addresses, files).
Every problem is reported, each on its own line, sorted by line.

Secrets: a pre-shared key is never written in the file (``psk: {env: NAME}`` or
``psk: {file: PATH}``); an inline key is an error whose message does not repeat it.
Paths (``known_hosts``, ``key_file``, psk ``file``) are resolved relative to the file.

The schema is documented in docs/DESIGN.md ("Topology file") and topologies/README.md.

Derived facts (a tunnel end's addresses and LAN networks, the path MTU, the bench port
facing an appliance port) are methods of :class:`Topology`, defined once in
:mod:`ipsec_hil.lab.topology.model`; nobody else computes them.

The package, one job per module: ``parts`` (lab, hosts, ports, links), ``tunnels``
(tunnels and their configurations), ``model`` (the whole lab and its derived facts),
``lines`` (YAML with line numbers), ``messages`` (pydantic errors as sentences),
``checks`` (cross-references), ``load`` (parse/load), ``registry`` (the models a caller
knows, passed to the loader).

Independence: nothing here imports the suite's hardware registry or ESP arithmetic (the
twin loads this package and must not see them; tests/oracle/test_twin_fresh_import.py).
Model names are checked against the registry the caller passes
(``load_topology(path, models=REGISTRY)``); a host's hardware profile is the suite's
business (``ipsec_hil.lab.expectations.hardware.host_profile``).
"""

from __future__ import annotations

from ipsec_hil.lab.errors import TopologyError
from ipsec_hil.lab.topology.load import load_topology, parse_topology
from ipsec_hil.lab.topology.model import Topology
from ipsec_hil.lab.topology.parts import (
    CIPHERS,
    FAMILIES,
    MTU_MAX,
    MTU_MIN_IPV4,
    MTU_MIN_IPV6,
    Cipher,
    Family,
    Host,
    Jump,
    LabgridInfo,
    LabInfo,
    Link,
    Mgmt,
    NoiseModel,
    Port,
)
from ipsec_hil.lab.topology.registry import KnownModels
from ipsec_hil.lab.topology.tunnels import (
    MAX_CHILDREN,
    Children,
    Identities,
    Inject,
    PskRef,
    Tolerance,
    Tunnel,
    TunnelConfig,
    TunnelEnd,
)

__all__ = [
    "Topology",
    "TopologyError",
    "LabInfo",
    "LabgridInfo",
    "Host",
    "Mgmt",
    "Jump",
    "Port",
    "NoiseModel",
    "Link",
    "Tunnel",
    "TunnelEnd",
    "Children",
    "Identities",
    "Inject",
    "PskRef",
    "Tolerance",
    "TunnelConfig",
    "load_topology",
    "KnownModels",
    "parse_topology",
    "CIPHERS",
    "FAMILIES",
    "Family",
    "Cipher",
    "MTU_MAX",
    "MTU_MIN_IPV4",
    "MTU_MIN_IPV6",
    "MAX_CHILDREN",
]
