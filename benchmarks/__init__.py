"""Benchmarks: ``python -m benchmarks <name> --json`` prints one JSON object last."""
