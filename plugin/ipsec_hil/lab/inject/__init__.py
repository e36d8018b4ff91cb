"""Crafted ESP on the wire toward an appliance under test (issue 12).

Why a library: the wire tests (replay window, tampered frames, ESN, every size) all do
the same three things -- craft frames for the association `setkey -D` shows
(`craft.Crafter`: the suite's own ESP sealing, checked byte for byte against scapy's;
keys kept in memory), send a whole batch from the injection point the topology names
(`tunnels.<t>.inject`; `run.inject` with the peer's or the bench's Host), and count on
the far LAN which frames were delivered and how often (`run.Delivery`).  Nothing here
knows the virtual lab; keys never reach a log, an exception, or a host: the scripts and
stdin the hosts get carry ciphertext only.
"""
from .craft import (END_INDEX, MAGIC, VARIANTS, Crafter, Frame, Inner, InjectError, SaKeys, min_inner)
from .run import Datagram, Delivery, WirePath, inject, sweep_udp
from .tunnel import NoInjectionPoint, TunnelWire

__all__ = ["END_INDEX", "MAGIC", "VARIANTS", "Crafter", "Datagram", "Delivery", "Frame", "Inner", "InjectError",
           "NoInjectionPoint", "SaKeys", "TunnelWire", "WirePath", "inject", "min_inner", "sweep_udp"]
