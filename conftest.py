"""Root conftest: load the suite's pytest plugin (options, markers, fixtures, run glue)."""

# records before fixtures: fixtures imports records, which must be registered (and
# assertion-rewritten) first.
# driver_plugin (--driver) and gate_plugin (--baseline/--gate) after session: their
# sessionstart/sessionfinish run around the virtual lab and the page plugin.session makes.
pytest_plugins = ["plugin.pytest_plugin", "plugin.records", "plugin.session", "plugin.fixtures",
                  "plugin.driver_plugin", "plugin.gate_plugin"]
