"""ipsec-hil pytest plugin: acceptance tests of IPsec offload drivers (octep, npuep).

``plugin.lab`` is the plain-Python library (no pytest import): the lab, its appliances,
tunnel cases, active tunnels, the model registry. The pytest glue over it:
``plugin.pytest_plugin`` (the ``pytest11`` entry point: options, markers, topology),
``plugin.fixtures``, ``plugin.session`` (the controller's HilSession: virtual lab, hardware
facts, the page), ``plugin.records`` (what each test measured), ``plugin.gate_plugin`` and
``plugin.driver_plugin`` (page sections through ``plugin.hookspecs``), ``plugin.exitcodes``.
"""
