"""Root conftest: load the suite's plugin when pytest did not load it from its entry point.

Installed (``pip install -e .``, tools/setup), pytest loads ``ipsec_hil.pytest_plugin`` from
its ``pytest11`` entry point, registered under that same name, so this line is a no-op;
with plugin autoload disabled (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) it loads the plugin
from here. The plugin brings in its fixtures, the driver and gate plugins itself.
"""

pytest_plugins = ["ipsec_hil.pytest_plugin"]
