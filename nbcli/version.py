"""nb's version, in a module of its own: the package's `__init__` re-exports the API from nbcli.api,
so a module that records the version (nbcli.provenance) takes it from here, not from the package."""

__version__ = "0.1.0"
