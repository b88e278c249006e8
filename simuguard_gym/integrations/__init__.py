"""Integrations with training and evaluation frameworks (optional dependencies, imported lazily)."""
