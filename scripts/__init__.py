"""Maintenance scripts run as `python scripts/<name>.py`: the architecture diagram, the console screenshots, the
same-evaluation check."""
