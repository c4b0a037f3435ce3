"""Policies built into the core distribution (registered through entry points
like every plugin)."""
