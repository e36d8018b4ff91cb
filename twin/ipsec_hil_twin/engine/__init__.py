"""The virtual lab's ESP engine: real ESP (RFC 4303) over a TUN device in user space.

One engine runs inside each emulated appliance's network namespace
(`python -m ipsec_hil_twin.engine --host-dir DIR`).  It owns the TUN `esp0`, raw ESP sockets,
the routes that steer inner traffic into `esp0`, the driver's counters (shared memory)
and the control socket `DIR/engine.sock` (DESIGN.md "Engine control API").

Modules, one job each:
  sizes      ESP framing of the engine and FreeBSD 14's PMTU gate, from its sources
  esp        the cipher suites: seal/open one ESP payload; anti-replay window
  selectors  traffic selectors `prefix[proto/port]` and matching packets against them
  sa         SA specification (validated at the API boundary)
  hostcfg    host.json -> typed host description
  counters   shared-memory counter block (names and layout; what each driver counts
             is ipsec_hil_twin.personality)
  faults     reading faults.json / sysctl.json cheaply from hot loops
  routes     ip rules + the "own" and "fwd" tables into esp0 (pyroute2)
  datapath   the transmit and receive loops (one process each)
  pacer      issue 531's slow first stream (fault slow_first_stream)
  control    the JSON-lines control server
  client     a tiny client for engine.sock (tests, ipsec_hil_twin.ike, ipsec_hil_twin.fbsd)
"""
