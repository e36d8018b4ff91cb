"""A third appliance model added the way docs/DESIGN.md ("Where to add ...") says: in a
temporary copy of the suite, a registry entry, a twin personality and a topology block.

The model, "xgs999", is modelled on the XGS 136 (one engine, a forwarded and an own door,
IPv4 and IPv6 deliveries counted apart) under a driver and counter names of its own, so an
acceptance test that passes on it has read the new entry's OIDs from the new personality:
nothing of the xgs136's would answer. Its topology block is two appliances of the model,
wired WAN to WAN, with one tunnel between them (neither existing block changes).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

MODEL = "xgs999"
DRIVER = "nineep"
TUNNEL = "t999"
#: the XGS 136's roles under other names: forwarded / own door, IPv4 / IPv6 delivered
COUNTERS = ("enc_fwd", "enc_own", "dec_v4", "dec_v6", "bad", "nosa", "nonhop", "qdrop")

#: What a copy of the suite needs to run an acceptance test as a checkout does.
COPIED = ("plugin/ipsec_hil", "twin/ipsec_hil_twin", "tests_hil", "topologies", "conftest.py", "pytest.ini")

#: The two edits a person types, as text (new_model_edits/): the registry entry in
#: plugin/ipsec_hil/lab/expectations/hardware.py and the twin's personality in
#: twin/ipsec_hil_twin/personality.py, with the model's names filled in.
EDITS = Path(__file__).with_name("new_model_edits")
NAMES = {"MODEL": MODEL, "DRIVER": DRIVER, "COUNTERS": COUNTERS}
REGISTRY_ENTRY = (EDITS / "hardware_entry.txt").read_text().format(**NAMES)

PERSONALITY = (EDITS / "personality_entry.txt").read_text().format(**NAMES)

#: The topology block: two appliances of the model, their WAN link, one tunnel.
HOSTS = {
    "x999": {"role": "appliance", "model": MODEL, "profile": {"floor_margin": 0.5, "counter_lag_s": 0.1},
             "ports": {"lan": {"ipv4": "198.51.100.129/26", "mtu": 1500, "rate_mbit": 100},
                       "wan": {"ipv4": "192.0.2.65/26", "mtu": 1500, "rate_mbit": 100}}},
    "x999peer": {"role": "appliance", "model": MODEL, "profile": {"floor_margin": 0.5, "counter_lag_s": 0.1},
                 "ports": {"lan": {"ipv4": "198.51.100.193/26", "mtu": 1500, "rate_mbit": 100},
                           "wan": {"ipv4": "192.0.2.66/26", "mtu": 1500, "rate_mbit": 100}}},
}
LINKS = [{"a": "x999.wan", "b": "x999peer.wan", "rate_mbit": 100}]
TUNNELS = {TUNNEL: {"local": {"host": "x999", "port": "wan", "lan": "lan"},
                    "remote": {"host": "x999peer", "port": "wan", "lan": "lan", "cipher": "offload"},
                    "outer": ["ipv4"], "inner": ["ipv4"], "ciphers": ["aes-gcm-16"], "children": 1,
                    "identities": None, "psk": {"env": "HIL_PSK_VIRTUAL"}}}


def _insert(path: Path, anchor: str, text: str, *, before: bool = True) -> None:
    """``text`` put before (or after) the one place ``anchor`` occurs in ``path``; a file
    whose anchor moved fails naming it (the recipe must be mended, not silently skipped)."""
    src = path.read_text()
    if src.count(anchor) != 1:
        raise AssertionError(f"{path}: expected the anchor {anchor!r} once, found it {src.count(anchor)} times")
    path.write_text(src.replace(anchor, text + anchor if before else anchor + text))


def add_model(checkout: Path) -> list[str]:
    """Add the model to ``checkout`` (a copy of the suite); return the files changed,
    relative to it -- the files a person adding a model edits."""
    hardware = checkout / "plugin/ipsec_hil/lab/expectations/hardware.py"
    _insert(hardware, "], default_gate=", REGISTRY_ENTRY)
    personality = checkout / "twin/ipsec_hil_twin/personality.py"
    _insert(personality, "}\n\nBY_DRIVER", PERSONALITY)
    topology = checkout / "topologies/virtual.yaml"
    data = yaml.safe_load(topology.read_text())
    data["hosts"].update(HOSTS)
    data["links"].extend(LINKS)
    data["tunnels"].update(TUNNELS)
    topology.write_text(yaml.safe_dump(data, sort_keys=False))
    return [str(p.relative_to(checkout)) for p in (hardware, personality, topology)]


def copy_suite(repo: Path, dest: Path) -> Path:
    """The parts of the suite a checkout runs an acceptance test from, copied to ``dest``."""
    for rel in COPIED:
        src = repo / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest
