"""Benchmarks printing ratios to a baseline timed in the same run: `python -m bench.NAME` from the repository root."""
