"""The domain layer (see docs/reference.md, "Layers")."""
