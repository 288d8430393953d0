"""Frozen copy of main's noisy bisection (760128a), the benchmark baseline "main"."""
