"""Benchmarks: scripts run as `python bench/<name>.py` (or `python -m bench.<name>`) that write bench/results/."""
