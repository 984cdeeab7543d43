"""Tools shared by the tests, bin/soak and bench/: the fake provider, running systems and stacks, the soak."""
