"""KB files of other products, read into the KB's records and written back (kb/formats/<format>.py, one
file per format, each with `read(path, name) -> Imported`, `sniff(path, head) -> bool` and, where the
product imports files, `write(path, contents) -> (faqs, variants)`).

`detect` names a file's format from its extension and first bytes; `read_any` and `write_any` dispatch.
Our own JSONL and CSV stay in kb/files.py and are formats `jsonl` and `csv` here.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from kb.files import STDIO, read_kb, write_kb
from kb.formats.base import Imported, KbContents
from kb.records import KbFormatError

#: every format `faq kb import --format` takes, in the order `detect` tries them
FORMATS = ("jsonl", "csv", "qnamaker", "azure", "qnabot", "rasa", "dialogflow", "faqpage")
#: formats `faq kb export --format` writes
EXPORT_FORMATS = ("jsonl", "csv", "qnamaker", "azure")
_MODULES = {"qnamaker": "kb.formats.qnamaker", "azure": "kb.formats.azure", "qnabot": "kb.formats.qnabot",
            "rasa": "kb.formats.rasa", "dialogflow": "kb.formats.dialogflow", "faqpage": "kb.formats.faqpage"}
_HEAD_BYTES = 65536

__all__ = ["EXPORT_FORMATS", "FORMATS", "Imported", "KbContents", "detect", "read_any", "write_any"]


def _module(fmt: str) -> Any:
    return importlib.import_module(_MODULES[fmt])


def _head(path: str | Path) -> bytes:
    p = Path(path)
    if p.is_dir():
        return b""
    with open(p, "rb") as fh:
        return fh.read(_HEAD_BYTES)


def detect(path: str | Path) -> str:
    """The format of the file (or, for Rasa, folder) at `path`. Raises KbFormatError naming the formats
    when none fits, FileNotFoundError when there is nothing there."""
    if str(path) == STDIO:
        return "jsonl"
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    head = _head(p)
    for fmt in ("qnamaker", "azure", "qnabot", "rasa", "faqpage", "dialogflow"):
        if _module(fmt).sniff(p, head):
            return fmt
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise KbFormatError([f"{path}: cannot tell the format of this file; name it with --format "
                         f"({', '.join(FORMATS)})"], source=str(path))


def read_any(path: str | Path, fmt: str | None = None, name: str | None = None) -> Imported:
    """Read a KB file of any format (`fmt`, else `detect`). Raises KbFormatError (`file:line: reason`
    for every problem; nothing is returned half-read), OSError as is."""
    fmt = fmt or detect(path)
    if fmt not in FORMATS:
        raise KbFormatError([f"unknown format {fmt!r}; one of {', '.join(FORMATS)}"])
    if fmt in ("jsonl", "csv"):
        if str(path) != STDIO and Path(path).suffix.lower() not in ((".jsonl", ".ndjson") if fmt == "jsonl"
                                                                    else (".csv",)):
            raise KbFormatError([f"{path}: format {fmt} needs a .{fmt} file"])
        return Imported(format=fmt, records=read_kb(path, name=name))
    return _module(fmt).read(path, name or str(path))


def write_any(path: str | Path, fmt: str, contents: KbContents) -> tuple[int, int]:
    """Write the KB as `fmt` (EXPORT_FORMATS) to `path`, whose extension picks the file kind where a
    format has several (qnamaker: .tsv, .xlsx, .json; azure: .json, .tsv, .xlsx). Returns (FAQs, variants)."""
    if fmt in ("jsonl", "csv"):
        return write_kb(path, contents.records)
    if fmt not in EXPORT_FORMATS:
        raise KbFormatError([f"format {fmt!r} cannot be exported; one of {', '.join(EXPORT_FORMATS)}"])
    return _module(fmt).write(path, contents)
