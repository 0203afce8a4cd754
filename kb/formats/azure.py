"""Azure AI Language question answering project exports: the authoring API's JSON ({"metadata": {...},
"assets": {"qnas": [...], "synonyms": [{"alterations": [...]}]}}); its TSV and XLSX are QnA Maker's table
(kb/formats/qnamaker.py reads them when detected; `--format azure` reads them here). Synonyms become the KB's
synonyms, `metadata.settings.defaultAnswer` its default answer. The pair mapping: kb/formats/qna.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from kb.formats import qna, replica
from kb.formats.base import Imported, KbContents, clean_synonyms
from kb.records import KbFormatError

NAME = "azure"
API_VERSION = "2023-04-01"


def sniff(path: Path, head: bytes) -> bool:
    if path.suffix.lower() != ".json":
        return False
    start = head.decode("utf-8-sig", "replace")
    return '"assets"' in start or '"qnas"' in start


def read(path: str | Path, name: str) -> Imported:
    table = replica.read_tables(path, name, NAME)
    if table is not None:
        return table
    doc, text = qna.load_json(path, name)
    if not isinstance(doc, dict) or not isinstance(doc.get("assets", doc), dict):
        raise KbFormatError([f"{name}:1: an Azure question answering export is an object with \"assets\""],
                            source=name)
    assets: dict[str, Any] = doc.get("assets", doc)
    rows, suggestions = qna.qna_items(name, NAME, assets.get("qnas", []), text, "qnas", "metadata", "dialog",
                                      "activeLearningSuggestions")
    raw_synonyms = assets.get("synonyms") or []
    groups = [s.get("alterations") if isinstance(s, dict) else s for s in raw_synonyms] \
        if isinstance(raw_synonyms, list) else raw_synonyms
    if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
        rows.append((1, None, "assets.synonyms must be a list of {\"alterations\": [term, ...]}"))
        groups = []
    # their limits are the KB setting's (app/settings.py), checked before anything is imported
    synonyms = clean_synonyms(groups)
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    settings = meta.get("settings") if isinstance(meta.get("settings"), dict) else {}
    default_answer = settings.get("defaultAnswer") if isinstance(settings.get("defaultAnswer"), str) else None
    return qna.finish(name, NAME, rows, suggestions, synonyms=synonyms,
                      default_answer=(default_answer or "").strip() or None)


def write(path: str | Path, contents: KbContents) -> tuple[int, int]:
    written = replica.write_tables(path, contents)
    if written is not None:
        return written
    if Path(path).suffix.lower() != ".json":
        raise KbFormatError([f"{path}: an Azure question answering export is .json, .tsv, .xlsx or .zip"])
    docs = qna.qna_documents(contents, "dict", "dialog", "activeLearningSuggestions")
    settings = {"defaultAnswer": contents.default_answer} if contents.default_answer else {}
    document = {"api-version": API_VERSION, "stringIndexType": "Utf16CodeUnit",
                "metadata": {"language": contents.language or "en", "multilingualResource": False,
                             "settings": settings},
                "assets": {"synonyms": [{"alterations": list(g)} for g in contents.synonyms], "qnas": docs}}
    qna.write_json(path, document)
    return len(docs), sum(len(d["questions"]) for d in docs)
