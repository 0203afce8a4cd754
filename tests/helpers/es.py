"""The noida-db Elasticsearch-API emulator (bench/es_emulator.py) started and stopped for a test."""
from __future__ import annotations

import pytest


def start_es_emulator(data_dir):
    """Start the noida-db binary (Elasticsearch API only) on a free loopback port -> (process, url)
    (bench/es_emulator.py). Stop it with `stop_es_emulator(process)`."""
    from bench.es_emulator import start_emulator

    try:
        return start_emulator(data_dir)
    except RuntimeError as exc:
        pytest.fail(str(exc))


def stop_es_emulator(proc) -> None:
    from bench.es_emulator import stop_emulator

    stop_emulator(proc)
