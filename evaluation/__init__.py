"""Offline and online evaluation: everything that measures the service, none of what runs it.

Serving code (`app/`, `index/`, `models/`, `kb/`) never imports this package; it may import all of them.
"""
