"""The queue layer (see docs/reference.md, "Layers")."""
