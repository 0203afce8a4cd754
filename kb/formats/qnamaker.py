"""QnA Maker knowledge base exports: the portal's TSV and XLSX (columns Question, Answer, Source, Metadata,
SuggestedQuestions, IsContextOnly, Prompts, QnaId) and the v4 API's JSON download ({"qnaDocuments": [...]}).
Azure question answering exports the same table, so its TSV and XLSX read here too. The mapping: kb/formats/qna.py.
"""
from __future__ import annotations

from pathlib import Path

from kb.formats import qna, replica
from kb.formats.base import Imported, KbContents
from kb.records import KbFormatError

NAME = "qnamaker"


def sniff(path: Path, head: bytes) -> bool:
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".txt"):
        first = head.decode("utf-8-sig", "replace").split("\n", 1)[0].lower().split("\t")
        return "question" in [c.strip() for c in first] and "answer" in [c.strip() for c in first]
    if suffix in (".xlsx", ".zip"):
        return head.startswith(b"PK")
    if suffix == ".json":
        start = head[:4096].decode("utf-8-sig", "replace")
        return '"qnaDocuments"' in start or '"qnaList"' in start
    return False


def read(path: str | Path, name: str) -> Imported:
    if Path(path).suffix.lower() == ".json":
        doc, text = qna.load_json(path, name)
        key = "qnaDocuments" if isinstance(doc, dict) and "qnaDocuments" in doc else "qnaList"
        if not isinstance(doc, dict) or key not in doc:
            raise KbFormatError([f"{name}:1: a QnA Maker JSON export is an object with \"qnaDocuments\""],
                                source=name)
        rows, suggestions = qna.qna_items(name, NAME, doc[key], text, key, "metadata", "context",
                                          "alternateQuestionClusters")
        return qna.finish(name, NAME, rows, suggestions)
    return replica.read_tables(path, name, NAME) or qna.read_table(name, NAME, qna.tsv_rows(path, name), escaped=True)


def write(path: str | Path, contents: KbContents) -> tuple[int, int]:
    if Path(path).suffix.lower() == ".json":
        docs = qna.qna_documents(contents, "list", "context", "alternateQuestionClusters")
        qna.write_json(path, {"qnaDocuments": docs})
        return len(docs), sum(len(d["questions"]) for d in docs)
    written = replica.write_tables(path, contents)
    if written is None:
        raise KbFormatError([f"{path}: a QnA Maker export is .tsv, .xlsx, .zip or .json"])
    return written
