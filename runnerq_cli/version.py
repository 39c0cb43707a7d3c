"""The package's version: one definition, imported by the package root, the CLI and the
worker registry (a leaf module, so nothing imports back up the package)."""

__version__ = "0.2.0"
