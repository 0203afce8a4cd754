"""Dialogflow knowledge connector FAQ documents: a CSV of two columns, question and answer, without a
header (a first row `question,answer`, in any case, is taken for one and skipped).

Mapping: rows whose answers are the same text (after trimming) are one FAQ, their questions its phrasings,
in file order. The format has no ids, so faq_id is `slug_id(first question of the FAQ, "df-")`: it reads
like the question and is the same on every import of the same file. Two FAQs whose first question is the
same but whose answers differ are an error at the second (`conflicting answer`): the file answers one
question two ways. Blank rows are skipped; a row of other than two cells is an error at its line. The file
is read as UTF-8 (a byte-order mark is allowed), as Dialogflow requires.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from kb.files import validate_rows
from kb.formats.base import Imported, slug_id
from kb.records import KbFormatError

NAME = "dialogflow"

Row = tuple[int, dict | None, str | None]


def sniff(path: Path, head: bytes) -> bool:
    if path.suffix.lower() != ".csv":
        return False
    text = head.decode("utf-8-sig", "replace")
    try:
        first = next((row for row in csv.reader(io.StringIO(text, newline="")) if any(c.strip() for c in row)),
                     None)
    except csv.Error:  # a cell cut by the end of the head, or broken: no verdict from a broken first row
        return False
    # our own CSV's header names faq_id; a Dialogflow FAQ has two cells on every row
    return first is not None and len(first) == 2 and "faq_id" not in (c.strip().lower() for c in first)


def read(path: str | Path, name: str) -> Imported:
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise KbFormatError([f"{name}:1: not valid UTF-8 ({exc.reason} at byte {exc.start})"], source=name) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[Row] = []
    faq_of: dict[str, str] = {}  # trimmed answer -> faq_id
    end = 0
    seen_row = False
    while True:
        start = end + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            # after a csv.Error the reader's place in the text is unknown: later rows would be misread
            problem = ("a quoted cell is not closed before the end of the file" if "unexpected end" in str(exc)
                       else str(exc))
            rows.append((start, None, f"invalid CSV: {problem}"))
            break
        end = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        first, seen_row = not seen_row, True
        if first and [c.strip().lower() for c in cells] == ["question", "answer"]:
            continue
        if len(cells) != 2:
            rows.append((start, None, f"{len(cells)} cell{'s' * (len(cells) != 1)}; a Dialogflow FAQ row has 2: "
                                      "question, answer"))
            continue
        question, answer = cells
        if not answer.strip():
            rows.append((start, None, "the answer cell is empty"))
            continue
        if not question.strip():
            rows.append((start, None, "the question cell is empty"))
            continue
        key = answer.strip()
        faq_id = faq_of.setdefault(key, slug_id(" ".join(question.split()), "df-"))
        rows.append((start, {"faq_id": faq_id, "question": question, "answer": key}, None))
    if not rows:
        raise KbFormatError([f"{name}:1: no question and answer rows in this file"], source=name)
    return Imported(format=NAME, records=validate_rows(name, rows))
