"""ipsec-hil pytest plugin: acceptance tests of IPsec offload drivers (octep, npuep).

``plugin.pytest_plugin`` is the pytest glue (options, markers, hooks), ``plugin.fixtures``
the fixtures, and ``plugin.lab`` the plain-Python library they are built on.
"""
