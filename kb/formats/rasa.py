"""Rasa retrieval intents (the response selector's FAQ and chit-chat): YAML training data (Rasa 2 and 3)
with `nlu:` examples and `responses:` (in domain.yml, a responses file, or the NLU file itself).

The path is one YAML file holding both, or a project folder: every *.yml / *.yaml under it (a folder's own
files first, then its subfolders, in name order), less what `rasa train` does not read either (the project's tests/, models/, results/ and actions/,
files named test_*, hidden folders); positions are `file:line` of the file itself, the folder's name first.

Mapping, for each retrieval intent (a name with a `/`, such as `faq/ask_channels`) whose response
`utter_faq/ask_channels` exists:
  intent name           faq_id, kept as is (`faq/ask_channels`: a faq_id may hold `/`), so the bot's
                        stories and the KB name the FAQ alike
  examples              the FAQ's phrasings, entity annotations reduced to their text: `[Berlin](city)`,
                        `[Berlin]{"entity": "city"}` and `[Berlin](city:BER)` read `Berlin`; both the
                        `examples: |` block and the list of `- text:` forms are read
  the response          answer: the first variant's `text` (Rasa picks a variant at random; the others are
                        not kept, with a note), buttons and images are not kept
  the part before `/`   metadata {"retrieval_intent": "faq"}
A retrieval intent without a response is an error at its line, and so is data without any retrieval
intent; a retrieval response no intent uses is skipped with a note, as Rasa only warns about it. Intents without `/`, responses without `/` (the bot's other
utterances), synonyms, regexes and lookups are skipped, each kind with one note. A response given twice
with other text keeps the first; a note names both. Two intents sharing examples through a YAML alias are
an error (each node is read once, so aliases cannot multiply the file). Rasa 1's Markdown data is not read.
A file nested deeper than MAX_YAML_DEPTH is refused at the line where it goes past it.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.composer import ComposerError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kb.files import validate_rows
from kb.formats.base import Imported
from kb.records import KbFormatError, check_answer

NAME = "rasa"
SUFFIXES = (".yml", ".yaml")
#: a folder sniffed for Rasa data: at most this many YAML files are opened (a bot project has a handful)
_SNIFF_FILES = 200
_HEAD_BYTES = 65536
#: Rasa's entity annotations: [text](entity), [text](entity:value), [text]{"entity": ...}, [text][{...}, ...]
_ENTITY = re.compile(r"\[(?P<text>[^\]]+?)\](?:\([^)]*\)|\{[^}]*\}|\[[^\]]*\])")
_NULL_TAG = "tag:yaml.org,2002:null"
#: a project's folders that hold no training data: `rasa test`'s conversations and NLU test sets (as do files
#: named test_*, Rasa's mark of a test file), trained models, results, custom actions; hidden folders
#: (.rasa/ caches, .venv/) are left out too
_NOT_TRAINING = {"tests", "models", "results", "actions"}
#: lists and mappings inside one another in a YAML file: Rasa's data is a handful deep, and PyYAML's composer
#: recurses once per level, so a file nested thousands deep would overflow Python's stack
MAX_YAML_DEPTH = 100

Row = tuple[int, dict | None, str | None]


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing, at its line, a node nested deeper than MAX_YAML_DEPTH."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels of lists and mappings",
                                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


@dataclass
class _Intent:
    file: str
    line: int
    examples: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line, example)
    broken: bool = False  # an error was reported already: no more about it


@dataclass
class _Response:
    file: str
    line: int
    texts: list[str]


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return any(_looks_like_rasa(_read_head(p)) for p in _yaml_files(path, _SNIFF_FILES))
    return path.suffix.lower() in SUFFIXES and _looks_like_rasa(head)


def _looks_like_rasa(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    sections = re.search(r"^(nlu|responses):", text, re.M) is not None
    return sections and ("utter_" in text or "intent:" in text)


def _read_head(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(_HEAD_BYTES)
    except OSError:
        return b""


def _yaml_files(folder: Path, most: int | None = None) -> Iterator[Path]:
    """The folder's YAML files, a folder's own before its subfolders', each in name order; walked lazily and
    pruned, so sniffing a large folder that is no Rasa project stops early."""
    found = 0
    for top, dirs, names in os.walk(folder):
        at_root = Path(top) == folder
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (at_root and d in _NOT_TRAINING))
        for n in sorted(names):
            if Path(n).suffix.lower() in SUFFIXES and not n.startswith("test_") and (Path(top) / n).is_file():
                yield Path(top) / n
                found += 1
                if most is not None and found >= most:
                    return


def read(path: str | Path, name: str) -> Imported:
    path = Path(path)
    if path.is_dir():
        files = [(f"{name.rstrip('/')}/{p.relative_to(path).as_posix()}", p) for p in _yaml_files(path)]
        if not files:
            raise KbFormatError([f"{name}: no .yml or .yaml files in this folder"], source=name)
    else:
        files = [(name, path)]
    problems: list[tuple[str, int, str]] = []
    intents: dict[str, _Intent] = {}
    responses: dict[str, _Response] = {}
    skipped: dict[str, list[str]] = {}
    duplicates: list[str] = []
    for file, p in files:
        root = _load(file, p, problems)
        if not isinstance(root, MappingNode):
            continue
        # YAML aliases make one node appear in many places: each is walked once, so a small file of aliases
        # to aliases cannot expand into millions of examples
        seen: dict[int, object] = {}
        for key, value in root.value:
            if _scalar(key) == "nlu":
                _read_nlu(file, value, intents, skipped, problems, seen)
            elif _scalar(key) == "responses":
                _read_responses(file, value, responses, skipped, duplicates, problems, seen)
    if not intents and not responses and not problems:
        where = name if path.is_dir() else f"{name}:1"
        raise KbFormatError([f"{where}: no retrieval intents (intents named like faq/ask_channels) in this Rasa "
                             "data: only those become FAQs"], source=name)
    rows_by_file: dict[str, list[Row]] = {file: [] for file, _ in files}
    notes: list[str] = []
    several: list[str] = []
    for intent, spec in intents.items():
        if spec.broken:
            continue
        response = responses.get(f"utter_{intent}")
        if response is None:
            problems.append((spec.file, spec.line, f"retrieval intent {intent!r} has no response utter_{intent} "
                                                   "(in the domain or a responses file)"))
            continue
        if not spec.examples:
            problems.append((spec.file, spec.line, f"retrieval intent {intent!r} has no examples"))
            continue
        if not response.texts:
            problems.append((response.file, response.line, f"response utter_{intent} has no variant with a text"))
            continue
        errors: list[str] = []
        answer = check_answer(response.texts[0].strip(), errors)
        if answer is None:
            problems.extend((response.file, response.line, f"utter_{intent}: {e}") for e in errors)
            continue
        if len(response.texts) > 1:
            several.append(f"utter_{intent}")
        metadata = {"retrieval_intent": intent.split("/", 1)[0]}
        for file, line, example in spec.examples:
            rows_by_file[file].append((line, {"faq_id": intent, "question": example, "answer": answer,
                                              "metadata": metadata}, None))
    # Rasa itself only warns about a response no intent uses (projects keep stale ones): skipped, with a note
    stale = [f"{name} ({r.file}:{r.line})" for name, r in responses.items() if name.removeprefix("utter_") not in intents]
    records = []
    for file, rows in rows_by_file.items():
        # every row of an FAQ carries its answer and metadata, so each file is validated on its own and names
        # itself; an intent whose examples are split over two files is whole in each
        try:
            records += validate_rows(file, rows)
        except KbFormatError as exc:
            problems.extend(_located(e) for e in exc.errors)
    if problems:
        order = {file: i for i, (file, _) in enumerate(files)}
        problems.sort(key=lambda p: (order.get(p[0], len(order)), p[1]))
        raise KbFormatError([f"{file}:{line}: {reason}" for file, line, reason in problems], source=name)
    if several:
        notes.append(f"{_count(several, 'response')} several variants; only the first text is kept as the "
                     f"answer ({_listed(several)})")
    notes += duplicates
    if stale:
        notes.append(f"{_count(stale, 'response')} no examples (no intent of that name), skipped: {_listed(stale)}")
    for kind, names in skipped.items():
        notes.append(f"{kind} skipped: {_listed(names)}")
    return Imported(format=NAME, records=records, notes=notes)


def _located(error: str) -> tuple[str, int, str]:
    """validate_rows' `file:line: reason` back into its parts (the file name may hold colons)."""
    m = re.match(r"(.*):(\d+): (.*)", error, re.S)
    return (m.group(1), int(m.group(2)), m.group(3)) if m else ("", 0, error)


def _load(file: str, path: Path, problems: list[tuple[str, int, str]]) -> Node | None:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        problems.append((file, 1, f"not valid UTF-8 ({exc.reason} at byte {exc.start})"))
        return None
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problems.append((file, mark.line + 1 if mark else 1, f"invalid YAML: {exc.problem or exc.context}"))
    except yaml.YAMLError as exc:
        problems.append((file, 1, f"invalid YAML: {exc}"))
    return None


def _scalar(node: Node | None) -> str | None:
    if isinstance(node, ScalarNode) and node.tag != _NULL_TAG:
        return node.value
    return None


def _line(node: Node) -> int:
    """The 1-based line where a node's text starts: a block scalar (`|`, `>`) starts below its indicator."""
    return node.start_mark.line + 1 + (1 if isinstance(node, ScalarNode) and node.style in ("|", ">") else 0)


def _get(mapping: MappingNode, key: str) -> Node | None:
    for k, v in mapping.value:
        if _scalar(k) == key:
            return v
    return None


def _read_nlu(file: str, node: Node, intents: dict[str, _Intent], skipped: dict[str, list[str]],
              problems: list[tuple[str, int, str]], seen: dict[int, object]) -> None:
    if not isinstance(node, SequenceNode):
        problems.append((file, _line(node), "nlu must be a list of `- intent:` entries"))
        return
    for entry in node.value:
        if id(entry) in seen:
            continue  # an alias of an entry read already says nothing new
        seen[id(entry)] = entry
        if not isinstance(entry, MappingNode):
            problems.append((file, _line(entry), "an nlu entry must be a mapping such as `- intent: faq/ask_x`"))
            continue
        name_node = _get(entry, "intent")
        if name_node is None:
            kind = next((_scalar(k) for k, _ in entry.value if _scalar(k) in ("synonym", "regex", "lookup")), None)
            if kind:
                skipped.setdefault(f"{kind} entries", []).append(_scalar(_get(entry, kind)) or "?")
            continue
        intent = (_scalar(name_node) or "").strip()
        if not intent:
            problems.append((file, _line(name_node), "an intent needs a name"))
            continue
        if "/" not in intent:
            skipped.setdefault("intents that are not retrieval intents (no '/')", []).append(intent)
            continue
        spec = intents.setdefault(intent, _Intent(file, _line(name_node)))
        examples = _get(entry, "examples")
        if examples is not None and id(examples) in seen:
            spec.broken = True
            problems.append((file, _line(name_node), f"the examples of intent {intent!r} are another intent's, "
                                                     "by a YAML alias; give each intent its own"))
        elif examples is not None:
            seen[id(examples)] = examples
            # Rasa merges an intent's examples from every file that gives some
            spec.examples += [(file, line, text) for line, text in _examples(file, examples, problems)]


def _examples(file: str, node: Node, problems: list[tuple[str, int, str]]) -> list[tuple[int, str]]:
    """(line, example) of an `examples:` block (`- text` lines) or list (strings or `- text:` mappings)."""
    out: list[tuple[int, str]] = []
    if isinstance(node, ScalarNode):
        first = _line(node)
        literal = node.style == "|"
        for i, raw in enumerate(node.value.split("\n")):
            line = first + i if literal else first
            text = raw.strip()
            if not text or text.startswith("#"):
                continue
            if not text.startswith("-"):
                problems.append((file, line, f"an example must start with '- ', got {text[:40]!r}"))
                continue
            out.append((line, strip_entities(text[1:].strip())))
    elif isinstance(node, SequenceNode):
        for item in node.value:
            text_node = _get(item, "text") if isinstance(item, MappingNode) else item
            text = _scalar(text_node) if text_node is not None else None
            if text is None:
                problems.append((file, _line(item), "an example must be a string or a mapping with `text`"))
                continue
            out.append((_line(text_node), strip_entities(text.strip())))
    else:
        problems.append((file, _line(node), "examples must be a `|` block of `- example` lines or a list"))
    return out


def strip_entities(example: str) -> str:
    """An example with its entity annotations reduced to the annotated text."""
    return _ENTITY.sub(lambda m: m.group("text"), example)


def _read_responses(file: str, node: Node, responses: dict[str, _Response], skipped: dict[str, list[str]],
                    duplicates: list[str], problems: list[tuple[str, int, str]], seen: dict[int, object]) -> None:
    if not isinstance(node, MappingNode):
        if _scalar(node) is None and isinstance(node, ScalarNode):
            return  # `responses:` left empty
        problems.append((file, _line(node), "responses must be a mapping of utter_ names to variants"))
        return
    for key, value in node.value:
        response_name = (_scalar(key) or "").strip()
        if not response_name.startswith("utter_") or "/" not in response_name:
            skipped.setdefault("responses that answer no retrieval intent", []).append(response_name or "?")
            continue
        texts: list[str] = []
        if isinstance(value, SequenceNode):
            known = seen.get(id(value))
            texts = known[1] if isinstance(known, tuple) else [
                text for variant in value.value
                if (text := _scalar(_get(variant, "text")) if isinstance(variant, MappingNode) else None)
                and text.strip()]
            seen[id(value)] = (value, texts)  # two responses sharing their variants by an alias: read once
        elif _scalar(value) is not None:
            texts.append(_scalar(value) or "")
        else:
            problems.append((file, _line(key), f"response {response_name} must be a list of `- text:` variants"))
            continue
        first = responses.get(response_name)
        if first is not None:
            if first.texts != texts:
                duplicates.append(f"response {response_name} is given again at {file}:{_line(key)}; the one at "
                                  f"{first.file}:{first.line} is kept")
            continue
        responses[response_name] = _Response(file, _line(key), texts)


def _count(names: list[str], noun: str) -> str:
    return f"1 {noun} has" if len(names) == 1 else f"{len(names)} {noun}s have"


def _listed(names: list[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
