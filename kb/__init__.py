"""The knowledge base as data: FAQ records, their validation limits, and the JSONL/CSV exchange files.

The bottom layer: everything else (training, the store, the service, evaluation) reads and checks KB
data through `kb.records` (and its files through `kb.files`), and this package imports nothing of the project's own.
"""
