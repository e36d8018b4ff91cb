"""Root conftest: load the suite's pytest plugin (options, markers, fixtures, run glue)."""

# records before fixtures: fixtures imports records, which must be registered (and
# assertion-rewritten) first.
pytest_plugins = ["plugin.pytest_plugin", "plugin.records", "plugin.session", "plugin.fixtures"]
