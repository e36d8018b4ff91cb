"""ipsec_hil.lab.comparing: a candidate build against its parent on the lab (the gate's
comparison, build_comparison) and the power of that decision (decision_power). A program
layer: it drives traffic, deploys drivers and brings tunnels up, so it sits above them."""
