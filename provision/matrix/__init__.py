"""The compatibility catalogue: its model, loader, invariants, cache, listings and refresh."""
