"""Planning: a request resolved against the catalogue into a Plan, its lock file, and the check of every catalogued request."""
