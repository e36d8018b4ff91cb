"""The project's own tests, one package (issue 53): every helper is imported by its place,
``tests.lab_factory``, ``tests.safety._lab``, ``tests.plugin.labfiles``, never as a top-level
name (``lab_factory``, ``parsers``, ``engine``) that could shadow or be shadowed by an
installed package. pytest (rootdir-relative, prepend) puts the checkout on sys.path."""
