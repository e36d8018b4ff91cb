"""The virtual lab: emulated Sophos XGS appliances in Linux network namespaces.

Never imported by `plugin`; the suite reaches the twin only over SSH and the network.
"""
