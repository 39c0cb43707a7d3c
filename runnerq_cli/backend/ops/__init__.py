"""The ops layer (see docs/reference.md, "Layers")."""
