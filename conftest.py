"""Root conftest: load the suite's pytest plugin (options, markers, fixtures, run glue)."""

pytest_plugins = ["plugin.pytest_plugin", "plugin.fixtures", "plugin.session", "plugin.records"]
