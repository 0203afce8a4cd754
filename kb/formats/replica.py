"""A QnA Maker / Azure question answering knowledge base as a whole: the XLSX workbook (sheet QnAs, and
Synonyms and Settings when the KB has them) and the ZIP of TSVs (one QnA table per source, Synonyms.tsv,
Settings.tsv; or the workbook itself) that the portals export and import. The QnA tables are kb/formats/qna.py's.

Synonyms are one group per row, its terms quoted and comma-separated (`"sdk","software development kit"`,
under a `Synonyms` header). Settings are Key / Value rows: `DefaultAnswerForKB` becomes the KB's default
answer; the others (active learning, language, multi-turn extraction) have no meaning here and are noted.
Anything else in a ZIP (UnstructuredContent/ texts) is noted and skipped.
"""
from __future__ import annotations

import csv
import io
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterable

from kb.formats import qna
from kb.formats.base import Imported, KbContents, clean_synonyms
from kb.records import KbFormatError

#: QnA Maker's own default answer: a Settings row with it says nothing the KB needs to keep
SERVICE_DEFAULT_ANSWER = "No good match found in KB."
_MAX_MEMBER_BYTES = 64 * 1024 * 1024


def _cells(rows: Iterable[tuple[int, list[Any]]]) -> list[tuple[int, list[str]]]:
    return [(line, [_cell_text(c) for c in cells]) for line, cells in rows]


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)



def synonyms_of(rows: list[tuple[int, list[str]]]) -> list[list[str]]:
    """Synonym rows (a `Synonyms` header, then one quoted comma-separated group per row, in its first cell)."""
    groups = []
    for _, cells in rows:
        text = (cells[0] if cells else "").strip()
        if not text or text.lower() == "synonyms":
            continue
        groups.append(next(csv.reader([text]), []))
    return clean_synonyms(groups)


def settings_of(rows: list[tuple[int, list[str]]]) -> tuple[str | None, list[str]]:
    """(the default answer, the names of the settings not kept)."""
    default, skipped = None, []
    for _, cells in rows:
        key, value = (cells + ["", ""])[:2]
        key, value = key.strip(), value.strip()
        if not key or key.lower() == "key":
            continue
        if key.lower() == "defaultanswerforkb":
            default = value if value and value != SERVICE_DEFAULT_ANSWER else None
        else:
            skipped.append(key)
    return default, skipped


def _is_qna_table(rows: list[tuple[int, list[str]]]) -> bool:
    header = [c.strip().lower() for c in rows[0][1]] if rows else []
    return "question" in header and "answer" in header


def combine(name: str, fmt: str, tables: list[tuple[str, list[tuple[int, list[str]]], bool]],
            synonyms: list[list[str]], settings: list[tuple[int, list[str]]] | None,
            others: list[str]) -> Imported:
    """The QnA tables ((name, rows, escaped)) read and merged, with the synonyms and settings beside them;
    every table's problems raised at once."""
    if not tables:
        raise KbFormatError([f"{name}:1: no QnA table (a sheet or TSV with Question and Answer columns)"],
                            source=name)
    records, suggestions, notes, problems = [], [], [], []
    for tname, rows, escaped in tables:
        try:
            part = qna.read_table(tname, fmt, rows, escaped)
        except KbFormatError as exc:
            problems += exc.errors
            continue
        records += part.records
        suggestions += part.suggestions
        notes += part.notes
    if problems:
        raise KbFormatError(problems, source=name)
    default, skipped = settings_of(settings or [])
    if skipped:
        notes.append(f"settings not kept (no meaning here): {', '.join(skipped)}")
    notes += [f"{o} is not a QnA table: skipped" for o in others]
    return Imported(format=fmt, records=records, synonyms=synonyms, suggestions=suggestions,
                    default_answer=default, notes=notes)


def read_xlsx(path: str | Path, name: str, fmt: str) -> Imported:
    from openpyxl import load_workbook

    try:
        wb = load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise KbFormatError([f"{name}:1: not an XLSX workbook ({exc})"], source=name) from None
    try:
        sheets = [(ws.title, _cells(enumerate(ws.iter_rows(values_only=True), start=1))) for ws in wb.worksheets]
    finally:
        wb.close()
    tables, synonyms, settings, others = [], [], None, []
    single = len(sheets) == 1
    for title, rows in sheets:
        tname = name if single else f"{name}[{title}]"
        if _is_qna_table(rows) or (single and rows):
            tables.append((tname, rows, False))
        elif title.strip().lower() == "synonyms":
            synonyms = synonyms_of(rows)
        elif title.strip().lower() == "settings":
            settings = rows
        elif rows:
            others.append(f"sheet {title!r}")
    return combine(name, fmt, tables, synonyms, settings, others)


def read_zip(path: str | Path, name: str, fmt: str) -> Imported:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise KbFormatError([f"{name}:1: not a ZIP archive ({exc})"], source=name) from None
    tables, synonyms, settings, others = [], [], None, []
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            member = info.filename
            if member.lower().endswith(".xlsx") and info.file_size <= _MAX_MEMBER_BYTES and not tables:
                # the portal's "KB replica" export: one workbook in the archive
                with tempfile.TemporaryDirectory(prefix="faq-replica-") as folder:
                    inner = Path(folder) / "replica.xlsx"
                    inner.write_bytes(archive.read(info))
                    found = read_xlsx(inner, f"{name}/{member}", fmt)
                found.notes += [f"{o} is not a QnA table: skipped" for o in
                                (i.filename for i in archive.infolist() if i is not info and not i.is_dir())]
                return found
            if not member.lower().endswith(".tsv") or info.file_size > _MAX_MEMBER_BYTES:
                others.append(member)
                continue
            try:
                text = archive.read(info).decode("utf-8-sig")
            except (UnicodeDecodeError, zipfile.BadZipFile, OSError) as exc:
                raise KbFormatError([f"{name}/{member}:1: cannot be read ({exc})"], source=name) from None
            rows = [(i, line.rstrip("\r").split("\t")) for i, line in enumerate(text.split("\n"), start=1)]
            base = Path(member).name.lower()
            if base == "synonyms.tsv":
                synonyms = synonyms_of(rows)
            elif base == "settings.tsv":
                settings = rows
            elif _is_qna_table(rows):
                tables.append((f"{name}/{member}", rows, True))
            else:
                others.append(member)
    return combine(name, fmt, tables, synonyms, settings, others)


def _settings_rows(contents: KbContents) -> list[list[str]]:
    return [["Key", "Value"], ["DefaultAnswerForKB", contents.default_answer]] if contents.default_answer else []


def _synonym_rows(contents: KbContents) -> list[list[str]]:
    def quoted(group: list[str]) -> str:
        out = io.StringIO()
        csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="").writerow(group)
        return out.getvalue()

    return [["Synonyms"]] + [[quoted(g)] for g in contents.synonyms] if contents.synonyms else []


def write_xlsx(path: str | Path, contents: KbContents) -> tuple[int, int]:
    from openpyxl import Workbook

    rows, _ = qna.table_rows(contents)
    wb = Workbook()
    sheets = [("QnAs", rows), ("Synonyms", _synonym_rows(contents)), ("Settings", _settings_rows(contents))]
    for i, (title, sheet_rows) in enumerate(s for s in sheets if s[1]):
        ws = wb.active if i == 0 else wb.create_sheet()
        ws.title = title
        for r, row in enumerate(sheet_rows, start=1):
            for c, value in enumerate(row, start=1):
                cell = ws.cell(row=r, column=c, value=value)
                cell.data_type = "s"  # never a formula: a cell starting with "=" is text here
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    try:
        wb.save(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return qna.counts(contents)


def write_zip(path: str | Path, contents: KbContents) -> tuple[int, int]:
    rows, _ = qna.table_rows(contents)
    members = {"QnAs.tsv": rows, "Synonyms.tsv": _synonym_rows(contents), "Settings.tsv": _settings_rows(contents)}
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, member_rows in members.items():
                if member_rows:
                    archive.writestr(member, "\n".join("\t".join(qna.escape(c) for c in r) for r in member_rows) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return qna.counts(contents)


def read_tables(path: str | Path, name: str, fmt: str) -> Imported | None:
    """The table kinds both services export, by extension: a KB replica (.xlsx, .zip)
    or one TSV; None for another extension (the JSON each reads its own way)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".xlsx":
        return read_xlsx(path, name, fmt)
    if suffix == ".zip":
        return read_zip(path, name, fmt)
    if suffix in (".tsv", ".txt"):
        return qna.read_table(name, fmt, qna.tsv_rows(path, name), escaped=True)
    return None


def write_tables(path: str | Path, contents: KbContents) -> tuple[int, int] | None:
    """`read_tables`' other way: the KB as a replica (.xlsx, .zip) or one TSV, by extension; None for another."""
    suffix = Path(path).suffix.lower()
    if suffix == ".xlsx":
        return write_xlsx(path, contents)
    if suffix == ".zip":
        return write_zip(path, contents)
    if suffix in (".tsv", ".txt"):
        return qna.write_tsv(path, contents)
    return None
