"""The views layer (see docs/reference.md, "Layers")."""
