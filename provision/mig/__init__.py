"""MIG layouts: the placement planner and what a host needs for a layout."""
