"""Contact-artifact detection (numpy only): the three-stage detector of SimuGuard 3.3."""
