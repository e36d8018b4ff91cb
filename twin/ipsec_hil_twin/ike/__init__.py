"""The twin's IKE-like control plane: swanctl.conf, a negotiation daemon, the swanctl CLI.

Why: the suite writes the same swanctl.conf for the virtual lab as for hardware and reads
strongSwan 5.9.8's outputs back; this package turns that file into tunnels between two
emulated appliances with strongSwan's outcomes (TS_UNACCEPTABLE, NO_PROPOSAL_CHOSEN,
AUTHENTICATION_FAILED, peer-not-responding timeouts).

The wire protocol (ipsec_hil_twin.ike.proto) is the twin's own JSON-over-UDP request/response
protocol on port 500.  It does NOT interoperate with real IKEv2 peers.

Modules: conf (grammar + model), proposals (proposal strings -> algorithms -> engine
cipher), ts (traffic selectors), proto (messages, X25519, HKDF, PSK proof), model (IKE_SA
and CHILD_SA state, matching), engine_client (engine.sock), swanctl (python -m
ipsec_hil_twin.ike.swanctl), and the daemon (python -m ipsec_hil_twin.ike.daemon) by role: configs (the loaded
swanctl.conf), transport (UDP 500, retransmits), initiator, responder, children (CHILD_SAs
and their associations in the engine), control (ike.sock).
"""
