"""Parameter identification of rigid bodies (RigPI)."""
