"""Real parts for the integration tests: a Docker engine, debootstrapped images, the test fleet
and the fake-GPU package repository (tests/fakegpu)."""
