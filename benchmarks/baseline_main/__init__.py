"""Frozen copy of main's noisy bisection (760128a), the benchmark baseline "main".

Only the modules the stall work of issue #23 changed are frozen here (the strategy class, its
posterior, search and noise model); the confirm step, the model check and the verdict builder,
unchanged by it, are imported from bisect_lab.strategies."""
