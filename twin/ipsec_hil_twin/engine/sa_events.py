"""What the kernel and the link do to the SAs the engine holds, outside charon's own
add/delete: a hard lifetime reached (op expire_sa) and an outer port going down and up
(op link). Functions of the engine's state (ipsec_hil_twin.engine.control.EngineState),
kept here so that class stays one screen per concern (tests/plugin/test_code_size.py)."""
from __future__ import annotations

import ipaddress
import sys
import time
from dataclasses import replace
from typing import Any

from ipsec_hil_twin.faults import fault_params


def expire_sa(state: Any, req: dict) -> dict:
    """The kernel's hard lifetime reached (sys/netipsec/key.c key_flush_sad: a hard
    expiry unlinks the SA and sends SADB_EXPIRE): the SA is gone from the SAD, charon's
    policy is not -- it goes with del_sa when charon's DELETE exchange ends. An inbound
    SA is simply gone (ESP for it is an unknown SPI); an outbound one leaves its policy
    matching packets that find no SA (ipsec_hil_twin.engine.datapath: ips_out_nosa).
    ``{"sas": [{"spi", "dst"}, ...]}``: a child's pair in one publish (one key_timehandler
    pass frees both)."""
    try:
        keys = [(int(x["spi"]), str(ipaddress.ip_address(x["dst"]))) for x in req["sas"]]
    except (KeyError, ValueError, TypeError):
        raise ValueError("expire_sa: expected sas: [{spi (int), dst (address)}, ...]") from None
    missing = []
    with state.lock:
        state.faults.refresh(time.monotonic(), force=True)
        leak = fault_params(state.faults, "leak_sa_on_delete") is not None
        for key in keys:
            inst = state.sas.get(key)
            if inst is None:
                missing.append(f"spi={key[0]:#x} dst={key[1]}")
            elif leak:
                state.leaked.add(key)  # the driver keeps what the kernel freed, as on del_sa
            elif inst.spec.direction == "in":
                state.sas.pop(key)
                state.free.append(inst.slot)
                state._drop(key)
            else:
                inst.expired = True
                state._put(inst)
        if not leak:
            state.publish()
    return {"ok": True} if not missing else {"ok": False, "error": f"expire_sa: no SA {', '.join(missing)}"}



def link(state: Any, req: dict) -> dict:
    """The appliance's `ifconfig IF down|up` (ipsec_hil_twin.fbsd.ifconfig), as the
    driver's ioctl sees it. A healthy driver keeps its associations across the flap
    (traffic stops while the port is down, the link does that); under fault
    sa_forgotten_on_link_down it forgets those whose local address is on the port: the
    kernel keeps them (setkey -D, strongSwan's list), its own cipher runs them from
    now on, so the driver's counters stand still once the port is up again."""
    ifname, up = req.get("ifname"), req.get("up")
    if not isinstance(ifname, str) or not isinstance(up, bool):
        raise ValueError("link: expected ifname (str) and up (bool)")
    forgotten = []
    with state.lock:
        state.faults.refresh(time.monotonic(), force=True)
        if not up and fault_params(state.faults, "sa_forgotten_on_link_down") is not None:
            for key, inst in list(state.sas.items()):
                local = inst.spec.src if inst.spec.direction == "out" else inst.spec.dst
                port = state.host.port_for(local)
                if inst.offloaded and port is not None and ifname in (port.ifname, port.name):
                    new = replace(inst, offloaded=False, routes=None)  # routes re-derived for the kernel path
                    state.sas[key] = new
                    state._put(new)
                    forgotten.append(f"{inst.spec.spi:08x}")
            if forgotten:
                print(f"engine {state.host.name}: fault sa_forgotten_on_link_down: {ifname} down, the driver "
                      f"forgot {', '.join(forgotten)}", file=sys.stderr, flush=True)
                state.publish()
    return {"ok": True, "forgotten": forgotten}


def refresh_faults(state: Any, force: bool = False) -> None:
    """Route-affecting faults (own_too_big_fragmented) are applied here, and SAs kept
    by leak_sa_on_delete are dropped once that fault is off."""
    with state.lock:
        if state.faults.refresh(time.monotonic(), force=force):
            print(f"engine {state.host.name}: faults now {sorted(state.faults.data) or 'none'}",
                  file=sys.stderr, flush=True)
        refuse = fault_params(state.faults, "nic_refuses_sa")
        refuse_key = None if refuse is None else str(refuse.get("cipher") or "any")
        if refuse_key != state.refusing:
            state.refusing = refuse_key
            state._redecide()
        big = fault_params(state.faults, "own_too_big_fragmented") is not None
        if big != state.own_big:
            state.own_big = big
            state.publish()
        if state.leaked and fault_params(state.faults, "leak_sa_on_delete") is None:
            for key in state.leaked:
                inst = state.sas.pop(key, None)
                if inst is not None:
                    state.free.append(inst.slot)
                    state._drop(key)
            state.leaked.clear()
            state.publish()
        state._sync_bypass()
