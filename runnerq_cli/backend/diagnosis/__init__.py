"""The diagnosis layer (see docs/reference.md, "Layers")."""
