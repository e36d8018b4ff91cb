"""Small lab files for the plugin's tests: two appliances, a bench, one tunnel (or none).

One builder instead of a YAML text per test: the tests differ in a model, a port's MTU or
an end's cipher, and that difference is what they pass here.
"""

from __future__ import annotations

from typing import Any

import yaml


def lab_file(name: str, *, models: tuple[str, str] = ("xgs3300", "xgs136"), names: tuple[str, str] = ("gw1", "gw2"),
             virtual: bool = True, wan: tuple[dict, dict] = ({}, {}), lan_ipv6: bool = False,
             tunnel: dict[str, Any] | None = None) -> str:
    """YAML of a lab ``name``: appliances ``names`` of ``models`` wan-to-wan, the first's LAN on
    the bench; ``tunnel`` (outer/inner/ciphers/remote cipher) adds tunnel ``t`` between them;
    a hardware lab (``virtual=False``) reaches every host locally (nothing is changed)."""
    hosts: dict[str, Any] = {}
    for i, (host, model) in enumerate(zip(names, models)):
        lan = {"ipv4": f"198.51.100.{1 + 64 * i}/26"}
        if lan_ipv6:
            lan["ipv6"] = f"fd00:{'ab'[i]}::1/64"
        hosts[host] = {"role": "appliance", "model": model,
                       "ports": {"wan": {"ipv4": f"192.0.2.{1 + i}/26", "ipv6": f"2001:db8:1::{1 + i}/64", **wan[i]},
                                 "lan": lan}}
    hosts["bench"] = {"role": "bench", "mgmt": {"local": True}, "ports": {"a": {"ipv4": "198.51.100.10/26"}}}
    if not virtual:
        for host in names:
            hosts[host]["mgmt"] = {"local": True}
    doc: dict[str, Any] = {"lab": {"name": name, "virtual": virtual}, "hosts": hosts,
                           "links": [{"a": f"{names[0]}.wan", "b": f"{names[1]}.wan"},
                                     {"a": f"{names[0]}.lan", "b": "bench.a"}]}
    if tunnel is not None:
        t = dict(tunnel)
        remote = {"host": names[1], "port": "wan", "lan": "lan"}
        if "remote_cipher" in t:
            remote["cipher"] = t.pop("remote_cipher")
        doc["tunnels"] = {"t": {"local": {"host": names[0], "port": "wan", "lan": "lan"}, "remote": remote,
                                "outer": ["ipv4"], "inner": ["ipv4"], "ciphers": ["aes-gcm-16"],
                                "psk": {"env": f"HIL_PSK_{name.upper()}"}, **t}}
    return yaml.safe_dump(doc, sort_keys=False)
