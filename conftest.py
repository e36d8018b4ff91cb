"""Root conftest: load the suite's pytest plugin (options, markers, fixtures)."""

pytest_plugins = ["plugin.pytest_plugin"]
