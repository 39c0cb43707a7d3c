"""The store layer (see docs/reference.md, "Layers")."""
