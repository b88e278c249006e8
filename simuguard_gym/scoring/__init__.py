"""Success-rate estimates, bounds and paired statistics (numpy only)."""
