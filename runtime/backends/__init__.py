"""SP backends: the three-phase interface, the leaf backend, Ulysses and Ring."""
