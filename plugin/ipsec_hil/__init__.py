"""ipsec-hil pytest plugin: acceptance tests of IPsec offload drivers (octep, npuep).

``ipsec_hil.lab`` is the plain-Python library (no pytest import): the lab, its appliances,
tunnel cases, active tunnels, the model registry. The pytest glue over it:
``ipsec_hil.pytest_plugin`` (the ``pytest11`` entry point: options, markers, topology),
``ipsec_hil.fixtures``, ``ipsec_hil.session`` (the controller's HilSession: virtual lab, hardware
facts, the page), ``ipsec_hil.records`` (what each test measured), ``ipsec_hil.gate_plugin`` and
``ipsec_hil.driver_plugin`` (page sections through ``ipsec_hil.hookspecs``), ``ipsec_hil.exitcodes``.
"""
