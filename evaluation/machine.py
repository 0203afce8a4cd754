"""What every benchmark records about the host: timings only compare between hosts that agree here."""
from __future__ import annotations

import platform
from pathlib import Path


def cpu_info() -> dict:
    """The CPU and whether it has int8 dot-product instructions (VNNI): dynamic int8 in ONNX Runtime
    is several times faster with them, so int8 latencies only compare between hosts that agree here."""
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    vnni = sorted(f for f in flags if "vnni" in f or f.startswith("amx"))
    return {"cpu_model": model, "int8_dot_product": vnni}
