"""A QnA Maker / Azure question answering knowledge base as a whole: the XLSX workbook (sheet QnAs, and
Synonyms and Settings when the KB has them) and the ZIP of TSVs (one QnA table per source, Synonyms.tsv,
Settings.tsv; or the workbook itself) that the portals export and import. The QnA tables are kb/formats/qna.py's.

Synonyms are one group per row, its terms quoted and comma-separated (`"sdk","software development kit"`,
under a `Synonyms` header). Settings are Key / Value rows: `DefaultAnswerForKB` becomes the KB's default
answer; the others (active learning, language, multi-turn extraction) have no meaning here and are noted.
Anything else in a ZIP (UnstructuredContent/ texts) is noted and skipped.

Both are ZIP archives, so both are held to the same bounds before anything is unpacked (MAX_MEMBERS,
MAX_UNPACKED_BYTES, MAX_RATIO, on the sizes the archive declares: zipfile never reads past them), then read a
line or a row at a time up to qna.MAX_ROWS; a workbook's XML is first scanned without building it
(MAX_XML_ELEMENTS, MAX_COLUMNS, no DTD, so no entity is ever expanded) before openpyxl parses it. A file past
a bound is refused, naming it, before it costs memory.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any
from xml.parsers import expat

from kb.formats import qna
from kb.formats.base import Imported, KbContents, clean_synonyms
from kb.records import KbFormatError, KbRecord

#: QnA Maker's own default answer: a Settings row with it says nothing the KB needs to keep
SERVICE_DEFAULT_ANSWER = "No good match found in KB."
#: entries in one archive: a replica holds a TSV per source besides Synonyms, Settings and its
#: UnstructuredContent/ texts, a workbook a few parts per sheet; zipfile builds an object per entry
#: of the directory before any can be checked, so a few MB of empty entries would cost memory
MAX_MEMBERS = 1_000
#: what the members an import reads may unpack to, all together: the TSVs or the XML of a KB of tens of
#: thousands of pairs are a few tens of MB, a bomb claims GBs
MAX_UNPACKED_BYTES = 64 * 1024 * 1024
#: how many times its compressed size a member may unpack to: real TSV and XML deflate 5 to 30 times,
#: a bomb 1,000 times (deflate's most)
MAX_RATIO = 100
#: members smaller than this are not held to MAX_RATIO: unpacked whole, they cost nothing to speak of
RATIO_FLOOR = 1024 * 1024
#: XML elements in all of a workbook's parts together: openpyxl makes a Python object of each cell and
#: shared string (a QnA table of qna.MAX_ROWS rows and 8 columns has about 1.7 million elements), so a few
#: MB of `<c/>` would take minutes and GBs
MAX_XML_ELEMENTS = 2_000_000
#: the columns of a workbook's sheet that are read (Excel 2003's last, IV): openpyxl widens every row to
#: its last cell, so one cell in column XFD would make each row 16,384 values; a QnA table has 8
MAX_COLUMNS = 256
_CELL_REF = re.compile(r"\$?([A-Za-z]+)")


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def synonyms_of(rows: Iterable[tuple[int, list[str]]]) -> list[list[str]]:
    """Synonym rows (a `Synonyms` header, then one quoted comma-separated group per row, in its first cell)."""
    groups = []
    for _, cells in rows:
        text = (cells[0] if cells else "").strip()
        if not text or text.lower() == "synonyms":
            continue
        groups.append(next(csv.reader([text]), []))
    return clean_synonyms(groups)


def settings_of(rows: Iterable[tuple[int, list[str]]]) -> tuple[str | None, list[str]]:
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


def _is_qna_header(cells: list[str]) -> bool:
    header = [c.strip().lower() for c in cells]
    return "question" in header and "answer" in header


class _Replica:
    """A replica's parts as they are read, one table at a time (each table's rows go straight from the file
    to qna.read_table): the QnA tables' records merged, every table's problems kept to raise at once."""

    def __init__(self, name: str, fmt: str):
        self.name, self.fmt = name, fmt
        self.records: list[KbRecord] = []
        self.suggestions: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.problems: list[str] = []
        self.synonyms: list[list[str]] = []
        self.settings: list[tuple[int, list[str]]] = []
        self.others: list[str] = []
        self.tables = 0

    def table(self, tname: str, rows: Iterable[tuple[int, list[str]]], escaped: bool) -> None:
        self.tables += 1
        try:
            part = qna.read_table(tname, self.fmt, rows, escaped)
        except qna.TooManyRows:
            raise
        except KbFormatError as exc:
            self.problems += exc.errors
            return
        self.records += part.records
        self.suggestions += part.suggestions
        self.notes += part.notes

    def part(self, tname: str, kind: str, label: str, rows: Iterator[tuple[int, list[str]]], escaped: bool,
             single: bool = False) -> None:
        """One sheet or TSV (`kind` "synonyms", "settings" or another), told apart by its first row that holds
        something; a part that is none of them is noted (as `label`), and not read further."""
        first = next(rows, None)
        if first is None:
            return
        if _is_qna_header(first[1]) or single:
            self.table(tname, chain([first], rows), escaped)
        elif kind == "synonyms":
            self.synonyms = synonyms_of(chain([first], rows))
        elif kind == "settings":
            self.settings = list(chain([first], rows))
        else:
            self.others.append(label)

    def imported(self) -> Imported:
        if not self.tables:
            raise KbFormatError([f"{self.name}:1: no QnA table (a sheet or TSV with Question and Answer columns)"],
                                source=self.name)
        if self.problems:
            raise KbFormatError(self.problems, source=self.name)
        default, skipped = settings_of(self.settings)
        if skipped:
            self.notes.append(f"settings not kept (no meaning here): {', '.join(skipped)}")
        self.notes += [f"{o} is not a QnA table: skipped" for o in self.others]
        return Imported(format=self.fmt, records=self.records, synonyms=self.synonyms,
                        suggestions=self.suggestions, default_answer=default, notes=self.notes)


# ---------------------------------------------------------------- archives and their bounds

def _refused(name: str, reason: str) -> KbFormatError:
    return KbFormatError([f"{name}: {reason}"], source=name)


def _declared_entries(path: str | Path) -> int | None:
    """The number of entries the archive's end record declares (None: none found), read before zipfile
    builds an object for each of them: 100,000 empty entries, 8 MB of ZIP, take it a second and 55 MB."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        start = max(0, fh.tell() - 22 - 0xFFFF)  # the record (22 bytes) and a comment of at most 64 KB
        fh.seek(start)
        tail = fh.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) < at + 22:
            return None
        count = int.from_bytes(tail[at + 10:at + 12], "little")
        if count != 0xFFFF or at < 20 or tail[at - 20:at - 16] != b"PK\x06\x07":
            return count
        # ZIP64: the locator before the end record points to the ZIP64 end record, which holds the count
        fh.seek(int.from_bytes(tail[at - 12:at - 4], "little"))
        record = fh.read(40)
    return int.from_bytes(record[32:40], "little") if record[:4] == b"PK\x06\x06" else None


def _too_many(name: str, count: int) -> KbFormatError:
    return _refused(name, f"{count:,} entries in the archive, more than the {MAX_MEMBERS:,} an import opens")


def _open_archive(path: str | Path, name: str, kind: str) -> zipfile.ZipFile:
    """The ZIP at `path` (`kind`: "a ZIP archive", "an XLSX workbook"), refused when it is not one or has
    more than MAX_MEMBERS entries (declared, then, as the end record may lie, found)."""
    try:
        declared = _declared_entries(path)
    except (OSError, ValueError) as exc:  # a file that cannot be read, or a record pointing anywhere
        raise KbFormatError([f"{name}:1: not {kind} ({exc})"], source=name) from None
    if declared is not None and declared > MAX_MEMBERS:
        raise _too_many(name, declared)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
        raise KbFormatError([f"{name}:1: not {kind} ({exc})"], source=name) from None
    if len(archive.infolist()) > MAX_MEMBERS:
        archive.close()
        raise _too_many(name, len(archive.infolist()))
    return archive


def _check_sizes(name: str, members: list[zipfile.ZipInfo]) -> None:
    """Refuse, before anything is unpacked, members that declare more than MAX_UNPACKED_BYTES together or
    one that unpacks to more than MAX_RATIO times its compressed size."""
    total = sum(i.file_size for i in members)
    if total > MAX_UNPACKED_BYTES:
        raise _refused(name, f"unpacks to {total:,} bytes, more than the {MAX_UNPACKED_BYTES:,} an import reads")
    for info in members:
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * info.compress_size:
            ratio = info.file_size / max(info.compress_size, 1)
            raise _refused(f"{name}/{info.filename}",
                           f"unpacks to {ratio:,.0f} times its compressed size ({info.file_size:,} bytes), "
                           f"more than the {MAX_RATIO} times of any real KB file")


#: what reading a member may raise besides KbFormatError: a broken or lying archive (a name that is not
#: the UTF-8 it claims included), a method or an encryption zipfile does not support
_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, UnicodeDecodeError, OSError, EOFError, NotImplementedError,
                  RuntimeError)


class _XmlScan:
    """Counts of one workbook's XML scan: its elements (MAX_XML_ELEMENTS is for all its parts together) and
    the rows openpyxl will yield for the sheets scanned so far (each sheet's last row number)."""

    def __init__(self) -> None:
        self.elements = 0
        self.rows = 0


def _check_xml(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, scan: _XmlScan) -> None:
    """Scan one XML part with expat, building nothing: refuse a DTD (entity definitions: no workbook has
    one, and expanding them is how an entity bomb or an external entity works), broken XML, more than
    MAX_XML_ELEMENTS elements in the workbook, a row with more than MAX_COLUMNS cells or a cell past
    column MAX_COLUMNS."""
    part = f"{name}/{info.filename}"
    parser = expat.ParserCreate()
    cells = row = 0

    def where() -> str:
        return f"{part}:{parser.CurrentLineNumber}"

    def doctype(*_: Any) -> None:
        raise KbFormatError([f"{where()}: declares a DTD (entity definitions), which no workbook has: refused "
                             "unread"], source=name)

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal cells, row
        scan.elements += 1
        if scan.elements > MAX_XML_ELEMENTS:
            raise KbFormatError([f"{where()}: more than {MAX_XML_ELEMENTS:,} XML elements in the workbook, the "
                                 "most an import reads"], source=name)
        local = tag.rpartition(":")[2]
        if local == "row":
            cells = 0
            # openpyxl yields every row number up to the sheet's last, filling gaps with blank rows
            r = attrs.get("r", "")
            number = (int(r) if len(r) < 19 else 10**18) if r.isascii() and r.isdigit() else row + 1
            if number > row:
                row = number
                if scan.rows + row > qna.MAX_ROWS:
                    raise qna.TooManyRows([f"{where()}: row {row:,} of a sheet: more than {qna.MAX_ROWS:,} rows, the "
                                           "most one import reads (split the file)"], source=name)
        elif local == "c":
            cells += 1
            ref = _CELL_REF.match(attrs.get("r", ""))
            letters = ref.group(1).upper() if ref else ""
            if cells > MAX_COLUMNS or len(letters) > 2 or (len(letters) == 2 and letters > "IV"):
                raise KbFormatError([f"{where()}: a cell past column IV ({MAX_COLUMNS}), the widest sheet an "
                                     "import reads"], source=name)

    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = doctype
    parser.StartElementHandler = start
    try:
        with archive.open(info) as fh:
            parser.ParseFile(fh)
        scan.rows += row
    except expat.ExpatError as exc:
        raise KbFormatError([f"{part}:{exc.lineno}: invalid XML: {expat.ErrorString(exc.code)} (column "
                             f"{exc.offset + 1})"], source=name) from None
    except _MEMBER_ERRORS as exc:
        raise KbFormatError([f"{part}:1: cannot be read ({exc})"], source=name) from None


def _looks_like_xml(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bool:
    """Whether openpyxl could parse the part as XML: whatever its name, it starts with `<` (after a BOM and
    blanks, in UTF-8 or UTF-16)."""
    with archive.open(info) as fh:
        head = fh.read(64)
    return head.replace(b"\x00", b"").lstrip(b"\xef\xbb\xbf\xfe\xff \t\r\n").startswith(b"<")


def _check_workbook(path: str | Path, name: str) -> None:
    archive = _open_archive(path, name, "an XLSX workbook")
    with archive:
        members = [i for i in archive.infolist() if not i.is_dir()]
        _check_sizes(name, members)
        scan = _XmlScan()
        for info in members:
            try:
                xml = _looks_like_xml(archive, info)
            except _MEMBER_ERRORS as exc:
                raise KbFormatError([f"{name}/{info.filename}:1: cannot be read ({exc})"], source=name) from None
            if xml:
                _check_xml(archive, info, name, scan)


# ---------------------------------------------------------------- reading

def _sheet_rows(ws: Any, where: str, limit: qna.RowLimit) -> Iterator[tuple[int, list[str]]]:
    """(row number, cells) of each of the sheet's rows that holds something, read one at a time; blank
    rows are counted against `limit` but not kept."""
    # the sheet's own <dimension> may claim any size: without it each row is as wide as its last cell
    ws.reset_dimensions()
    for number, values in enumerate(ws.iter_rows(values_only=True), start=1):
        limit.count(f"{where}:{number}")
        if any(v is not None and (not isinstance(v, str) or v.strip()) for v in values):
            yield number, [_cell_text(v) if v is not None else "" for v in values]


def read_xlsx(path: str | Path, name: str, fmt: str, limit: qna.RowLimit | None = None) -> Imported:
    _check_workbook(path, name)
    from openpyxl import load_workbook

    limit = limit or qna.RowLimit(name)
    try:
        wb = load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # noqa: BLE001 - openpyxl fails on a broken workbook in many ways, all the file's
        raise KbFormatError([f"{name}:1: not an XLSX workbook ({type(exc).__name__}: {exc})"],
                            source=name) from None
    replica = _Replica(name, fmt)
    try:
        single = len(wb.worksheets) == 1
        for ws in wb.worksheets:
            tname = name if single else f"{name}[{ws.title}]"
            replica.part(tname, ws.title.strip().lower(), f"sheet {ws.title!r}", _sheet_rows(ws, tname, limit),
                         False, single)
    except KbFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - as above: openpyxl parses the rows only as they are read
        raise KbFormatError([f"{name}:1: not a readable XLSX workbook ({type(exc).__name__}: {exc})"],
                            source=name) from None
    finally:
        wb.close()
    return replica.imported()


def _unescaped(rows: Iterator[tuple[int, list[str]]]) -> Iterator[tuple[int, list[str]]]:
    return ((line, [qna.read_cell(c) for c in cells]) for line, cells in rows)


def _check_lines(archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], name: str) -> None:
    """Refuse TSVs of more than qna.MAX_ROWS lines together before any row is read (decompressing them
    twice costs less than checking the rows before the limit)."""
    ahead = qna.RowLimit(name)
    for info in members:
        where = f"{name}/{info.filename}"
        try:
            with archive.open(info) as fh:
                lines = qna.line_count(fh)
        except _MEMBER_ERRORS as exc:
            raise KbFormatError([f"{where}:1: cannot be read ({exc})"], source=name) from None
        ahead.ahead(where, lines)
        ahead.read += lines


def read_zip(path: str | Path, name: str, fmt: str) -> Imported:
    archive = _open_archive(path, name, "a ZIP archive")
    limit = qna.RowLimit(name)
    replica = _Replica(name, fmt)
    with archive:
        members = [i for i in archive.infolist() if not i.is_dir()]
        _check_sizes(name, [i for i in members if i.filename.lower().endswith((".tsv", ".xlsx"))])
        _check_lines(archive, [i for i in members if i.filename.lower().endswith(".tsv")], name)
        for info in members:
            member, where = info.filename, f"{name}/{info.filename}"
            if member.lower().endswith(".xlsx") and not replica.tables:
                # the portal's "KB replica" export: one workbook in the archive
                with tempfile.TemporaryDirectory(prefix="faq-replica-") as folder:
                    inner = Path(folder) / "replica.xlsx"
                    try:
                        with archive.open(info) as src, open(inner, "wb") as dst:
                            shutil.copyfileobj(src, dst)
                    except _MEMBER_ERRORS as exc:
                        raise KbFormatError([f"{where}:1: cannot be read ({exc})"], source=name) from None
                    found = read_xlsx(inner, where, fmt, limit)
                found.notes += [f"{i.filename} is not a QnA table: skipped" for i in members if i is not info]
                return found
            if not member.lower().endswith(".tsv"):
                replica.others.append(member)
                continue
            kind = Path(member).stem.lower()
            try:
                with archive.open(info) as fh:
                    rows = qna.tsv_stream(fh, where, limit)
                    # Synonyms.tsv and Settings.tsv are written as a QnA table's Answer is; a QnA table's own
                    # cells are read by its columns in qna.read_table
                    replica.part(where, kind, member,
                                 rows if kind not in ("synonyms", "settings") else _unescaped(rows), True)
            except _MEMBER_ERRORS as exc:
                raise KbFormatError([f"{where}:1: cannot be read ({exc})"], source=name) from None
    return replica.imported()


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
                    archive.writestr(member, qna.tsv_text(member_rows, qna.COLUMNS if member == "QnAs.tsv" else None))
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
