"""An FAQ web page saved as HTML, read from its schema.org `FAQPage` markup (what search engines read for
FAQ rich results), in either form or both:
  JSON-LD    `<script type="application/ld+json">` holding an object, a list, or an `@graph`, with a node
             of `@type` "FAQPage" (or a list of types holding it) whose `mainEntity` lists
             {"@type": "Question", "name": ..., "acceptedAnswer": {"@type": "Answer", "text": ...}}, or
             references {"@id": ...} to such nodes elsewhere in the script (as Yoast writes them)
  microdata  an element `itemscope itemtype="https://schema.org/FAQPage"` whose `itemprop="mainEntity"`
             Question items have an `itemprop="name"` and an `itemprop="acceptedAnswer"` Answer item with an
             `itemprop="text"` (a `content` attribute, where given, is the value)

Mapping: each Question is an FAQ with one phrasing, its `name`; the answer is the accepted answer's HTML
as readable text (block elements end lines, `<li>` items are "- " lines, links read `text (url)` with the
url made absolute against the page's URL, entities decoded, whitespace collapsed within lines); faq_id is
`slug_id(question)`, the same on every import; source is the page's canonical URL (`<link rel="canonical">`,
else `<meta property="og:url">`) when it is an http(s) address, else none (a note names the one refused). Links
in answers are shown when they lead to an http(s), mailto or tel address, or a relative one.
A page giving its questions both ways (a plugin's JSON-LD beside the theme's microdata) yields each question
once: microdata questions already read from JSON-LD (same text, case and spacing aside) are skipped, with
a note. `suggestedAnswer`s are not kept (a note counts them). Errors name the line of the Question's
element, or of its "name" in the JSON-LD script (else the script's line); a page without FAQPage markup is
an error at line 1. Only the standard library's html.parser reads the page.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urljoin, urlsplit

from kb.files import validate_rows
from kb.formats.base import Imported, json_container_problem, json_key_pattern, line_finder, slug_id
from kb.records import KbFormatError

NAME = "faqpage"
SUFFIXES = (".html", ".htm")
#: how far past the detector's 64 KB head `sniff` looks for "FAQPage" (pages inline a lot of CSS and script)
_SNIFF_BYTES = 8 * 1024 * 1024
#: JSON-LD is walked to this depth for FAQPage nodes (real graphs are a few levels deep)
_MAX_DEPTH = 20
#: microdata property values open at once (each is fed all the HTML inside it; real ones nest 2 or 3 deep)
_MAX_CAPTURES = 32

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track",
         "wbr"}
#: elements that end a line, and those that stand apart as a paragraph
_LINE = {"br", "div", "li", "tr", "dt", "dd", "section", "article", "header", "footer", "nav", "aside", "main",
         "figure", "figcaption", "address", "details", "summary", "caption", "form", "fieldset"}
_PARAGRAPH = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "table", "blockquote", "pre", "hr"}
_HIDDEN = {"script", "style", "template", "noscript", "head", "title"}
_URL_PROPS = {"a": "href", "link": "href", "area": "href", "img": "src", "audio": "src", "video": "src",
              "source": "src", "iframe": "src", "object": "data", "time": "datetime", "data": "value",
              "meter": "value"}

#: what an FAQ's source may be: /match returns it, and clients show it as a link to the page, so only an
#: address a browser opens as a page is kept (never `javascript:`, `data:` or `file:`)
WEB_SCHEMES = ("http", "https")
#: what a link inside an answer may point to: a page, or an address to write to or call
_LINK_SCHEMES = WEB_SCHEMES + ("mailto", "tel")
#: what a browser strips from both ends of a URL: the C0 controls and the space
_URL_PADDING = "".join(map(chr, range(0x21)))

Row = tuple[int, dict | None, str | None]


# ---------------------------------------------------------------- HTML as text

class TextRenderer:
    """Builds readable text from HTML events (start, end, data), as the module docstring describes."""

    def __init__(self, base: Callable[[], str | None] = lambda: None) -> None:
        self.base = base  # the page's URL, which relative links are resolved against
        self.parts: list[str] = []
        self.started = False  # whether any text came yet: breaks before it are dropped
        self.pending = 0  # line breaks owed before the next text
        self.hidden = 0
        self.pre = 0
        self.links: list[tuple[str | None, int]] = []

    def start(self, tag: str, attrs: dict[str, str | None]) -> None:
        if tag in _HIDDEN:
            self.hidden += tag not in _VOID
            return
        if tag in _PARAGRAPH:
            self._brk(2)
        elif tag in _LINE:
            self._brk(1)
        if tag == "br":
            self.parts.append("\n")
            self.pending = 0
        elif tag == "li":
            self._text("- ")
        elif tag in ("td", "th"):
            self._text(" ")
        elif tag == "pre":
            self.pre += 1
        elif tag == "a":
            self.links.append((attrs.get("href"), len(self.parts)))

    def end(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        elif tag == "a" and self.links:
            href, at = self.links.pop()
            shown = " ".join("".join(self.parts[at:]).split())
            url = _link_target(self.base(), href)
            if shown and url and url not in (shown, f"mailto:{shown}", f"tel:{shown}"):
                self._text(f" ({url})")
        if tag in _PARAGRAPH:
            self._brk(2)
        elif tag in _LINE and tag != "br":
            self._brk(1)

    def data(self, text: str) -> None:
        if self.hidden or not text:
            return
        if self.pre:
            lines = text.split("\n")
            for i, line in enumerate(lines):
                if i:
                    self.parts.append("\n")
                    self.pending = 0
                self._text(line)
            return
        self._text(re.sub(r"\s+", " ", text))

    def _text(self, text: str) -> None:
        if not text or (text.isspace() and (self.pending or not self.parts)):
            return  # the markup's indentation between blocks
        if self.pending and self.started:
            self.parts.append("\n" * self.pending)
        self.pending = 0
        self.parts.append(text)
        self.started = self.started or not text.isspace()

    def _brk(self, n: int) -> None:
        self.pending = max(self.pending, n)

    def text(self) -> str:
        lines = [" ".join(line.split()) for line in "".join(self.parts).split("\n")]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def joined(base: str | None, href: str) -> str:
    """`href` resolved against `base`; as written when either is no URL urllib can parse."""
    try:
        return urljoin(base or "", href)
    except ValueError:  # "http://[::1" and the like
        return href


def _link_target(base: str | None, href: str | None) -> str:
    """Where a link in an answer is shown to lead: its URL made absolute against the page's, when that is an
    http(s), mailto or tel address or stays relative; "" for an anchor on the page, a script, data, a file."""
    if not href or not href.strip() or href.strip().startswith("#"):
        return ""
    url = joined(base, href.strip())
    return url if _scheme(url) in _LINK_SCHEMES + ("",) else ""


def _cleaned(url: str) -> str:
    # browsers drop tabs and line breaks anywhere in a URL, and controls and spaces around it: "java\tscript:"
    # runs as a script there, so it must be read as one here
    return re.sub(r"[\t\n\r]", "", url).strip(_URL_PADDING)


def _scheme(url: str) -> str | None:
    """The URL's scheme in lower case as a browser reads it ('' for a relative URL), None when it does not parse."""
    try:
        return urlsplit(_cleaned(url)).scheme.lower()
    except ValueError:  # "http://[::1" and the like
        return None


def web_url(url: str | None) -> str | None:
    """`url` as a browser reads it when it is an absolute http(s) address with a host, else None."""
    if not url:
        return None
    cleaned = _cleaned(url)
    try:
        parts = urlsplit(cleaned)
        return cleaned if parts.scheme.lower() in WEB_SCHEMES and parts.hostname else None
    except ValueError:  # "http://[::1" and the like
        return None


class _Fragment(HTMLParser):
    def __init__(self, renderer: TextRenderer) -> None:
        super().__init__(convert_charrefs=True)
        self.r = renderer

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.r.start(tag, dict(attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.r.start(tag, dict(attrs))
        if tag not in _VOID:
            self.r.end(tag)

    def handle_endtag(self, tag: str) -> None:
        self.r.end(tag)

    def handle_data(self, data: str) -> None:
        self.r.data(data)


def html_to_text(html: str, base: str | None = None) -> str:
    """An HTML fragment (a JSON-LD answer) as readable text; relative links resolved against `base`."""
    renderer = TextRenderer(lambda: base)
    parser = _Fragment(renderer)
    parser.feed(html)
    parser.close()
    return renderer.text()


# ---------------------------------------------------------------- the page

@dataclass
class _Item:
    """A microdata item: its types, its properties (name -> values: text or items) and the line it starts on."""

    types: list[str]
    line: int
    props: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class _Open:
    """An element open on the page's stack, with what it starts: an item, a property's text, or neither."""

    tag: str
    item: _Item | None = None
    props: list[str] = field(default_factory=list)  # the itemprop names this element's value goes to
    owner: _Item | None = None  # the item those properties belong to
    text: TextRenderer | None = None
    within: _Item | None = None  # the innermost item this element is in (or is)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[_Open] = []
        self.items: list[_Item] = []  # every item, in page order
        self.captures: list[TextRenderer] = []  # open property values, each fed all the HTML inside it
        self.scripts: list[tuple[int, str]] = []  # (line of the text, text) of each JSON-LD script
        self.script_line: int | None = None
        self.script_parts: list[str] = []
        self.canonical: str | None = None
        self.og_url: str | None = None
        self.base_href: str | None = None
        self.open_tags: Counter[str] = Counter()  # tags on the stack, so a stray end tag costs no search

    def handle_starttag(self, tag: str, attr_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v for k, v in attr_list}
        self._head(tag, attrs)
        for capture in self.captures:
            capture.start(tag, attrs)
        owner = self.stack[-1].within if self.stack else None
        props = (attrs.get("itemprop") or "").split()
        entry = _Open(tag, props=props, owner=owner, within=owner)
        if "itemscope" in attrs:
            entry.item = _Item((attrs.get("itemtype") or "").split(), self.getpos()[0])
            self.items.append(entry.item)
            if props and owner is not None:
                for p in props:
                    owner.props.setdefault(p, []).append(entry.item)
            entry.props = []  # the item is the value; nothing to capture
            entry.within = entry.item
        elif props and owner is not None:
            value = attrs.get("content")
            if value is None and tag in _URL_PROPS and attrs.get(_URL_PROPS[tag]) is not None:
                value = attrs[_URL_PROPS[tag]]
            if value is not None or tag in _VOID:
                for p in props:
                    owner.props.setdefault(p, []).append(value or "")
                entry.props = []
            elif len(self.captures) < _MAX_CAPTURES:
                entry.text = TextRenderer(self.url)
                self.captures.append(entry.text)
        if tag == "script" and (attrs.get("type") or "").strip().lower() == "application/ld+json":
            self.script_line, self.script_parts = self.getpos()[0], []
        if tag not in _VOID:
            self.stack.append(entry)
            self.open_tags[tag] += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self.script_line is not None:
            self.scripts.append((self.script_line, "".join(self.script_parts)))
            self.script_line = None
        if not self.open_tags[tag]:
            return  # a stray end tag
        while self.stack:
            entry = self.stack.pop()
            self._close(entry)
            if entry.tag == tag:
                break
        for capture in self.captures:
            capture.end(tag)

    def _close(self, entry: _Open) -> None:
        self.open_tags[entry.tag] -= 1
        if entry.text is not None:
            self.captures.remove(entry.text)
            value = entry.text.text()
            for p in entry.props:
                if entry.owner is not None:
                    entry.owner.props.setdefault(p, []).append(value)

    def handle_data(self, data: str) -> None:
        if self.script_line is not None:
            if not self.script_parts:
                # the script's text starts here: JSON-LD lines count from this line
                self.script_line = self.getpos()[0]
            self.script_parts.append(data)
        for capture in self.captures:
            capture.data(data)

    def close(self) -> None:
        super().close()
        if self.script_line is not None:
            # a script the page never closes runs to its end (some Pythons' parsers keep that text unread)
            if self.rawdata:
                self.handle_data(self.rawdata)
            self.scripts.append((self.script_line, "".join(self.script_parts)))
            self.script_line = None
        while self.stack:
            self._close(self.stack.pop())

    def url(self) -> str | None:
        """What relative links are relative to: <base href>, else the page's own URL (`source`)."""
        page = self.source()[0]
        return joined(page, self.base_href) if self.base_href else page

    def source(self) -> tuple[str | None, str | None]:
        """The page's own URL: its canonical link (a relative one, as a few CMSs write it, taken against
        og:url), else og:url, whichever is an http(s) address (`web_url`); and the first one refused, if any."""
        refused = None
        candidates = [joined(self.og_url, self.canonical) if self.canonical else None, self.og_url]
        for url in candidates:
            if url is None:
                continue
            kept = web_url(url)
            if kept:
                return kept, refused
            refused = refused or url
        return None, refused

    def _head(self, tag: str, attrs: dict[str, str | None]) -> None:
        if tag == "base" and attrs.get("href") and self.base_href is None:
            self.base_href = (attrs["href"] or "").strip()
        if tag == "link" and "canonical" in (attrs.get("rel") or "").lower().split() and attrs.get("href"):
            self.canonical = self.canonical or (attrs["href"] or "").strip() or None
        elif tag == "meta" and (attrs.get("property") or "").strip().lower() == "og:url" and attrs.get("content"):
            self.og_url = self.og_url or (attrs["content"] or "").strip() or None


# ---------------------------------------------------------------- reading

@dataclass
class _Faq:
    line: int
    question: str
    answer: str | None
    problem: str | None = None
    json_ld: bool = False


def sniff(path: Path, head: bytes) -> bool:
    if path.suffix.lower() not in SUFFIXES:
        return False
    if b"FAQPage" in head:
        return True
    if len(head) < 65536:
        return False
    with open(path, "rb") as fh:  # microdata sits in the body, often past the head's inline CSS
        chunk = b""
        read = 0
        while read < _SNIFF_BYTES:
            block = fh.read(1 << 20)
            if not block:
                return False
            read += len(block)
            chunk = chunk[-8:] + block
            if b"FAQPage" in chunk:
                return True
    return False


def read(path: str | Path, name: str) -> Imported:
    raw = Path(path).read_bytes()
    try:
        html = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        # saved pages are UTF-8 nearly always; a legacy page keeps its text readable as Windows-1252
        html = raw.decode("cp1252", "replace")
    page = _Page()
    page.feed(html)
    page.close()
    notes: list[str] = []
    counts = {"suggested": 0, "duplicates": 0, "differing": 0, "broken": 0}
    faqs: list[_Faq] = []
    found = False
    problems: list[Row] = []
    for line, text in page.scripts:
        found |= _json_ld(line, text, faqs, problems, counts, page.url())
    for item in page.items:
        if not _is(item.types, "FAQPage"):
            continue
        found = True
        before = len(faqs)
        for q in item.props.get("mainEntity", []):
            if isinstance(q, _Item):
                _microdata_question(q, faqs, counts)
        if len(faqs) == before and not item.props.get("mainEntity"):
            problems.append((item.line, None, "this FAQPage has no mainEntity Question items"))
    if not found:
        raise KbFormatError([f"{name}:1: no schema.org FAQPage (JSON-LD or microdata) in this page"], source=name)
    source, refused = page.source()
    if refused is not None:
        notes.append(f"the page's URL {refused[:80]!r} is not an http(s) address: "
                     + (f"the FAQs' source is {source}" if source else "the FAQs have no source"))
    rows: list[Row] = list(problems)
    from_json_ld: dict[str, _Faq] = {}
    for f in faqs:
        if f.json_ld:
            from_json_ld.setdefault(_key(f.question), f)
    for f in faqs:
        first = from_json_ld.get(_key(f.question)) if not f.json_ld and f.question else None
        if first is not None:
            # the microdata repeating a JSON-LD question: read once (a question twice in one form is
            # validate_rows' to merge, or to report when the answers differ)
            counts["duplicates"] += 1
            counts["differing"] += f.answer is not None and first.answer is not None and f.answer != first.answer
            continue
        if f.problem:
            rows.append((f.line, None, f.problem))
            continue
        rows.append((f.line, {"faq_id": slug_id(f.question), "question": f.question, "answer": f.answer,
                              "source": source}, None))
    if not rows:
        rows.append((1, None, "the FAQPage holds no questions"))
    records = validate_rows(name, sorted(rows, key=lambda r: r[0]))
    if counts["duplicates"]:
        notes.append(f"{_n(counts['duplicates'], 'question')} given both as JSON-LD and as microdata: read once, "
                     "from the JSON-LD" + (f" ({counts['differing']} with a different microdata answer)"
                                           if counts["differing"] else ""))
    if counts["suggested"]:
        notes.append(f"{_n(counts['suggested'], 'suggestedAnswer')}: not kept (only the accepted answer is)")
    if counts["broken"]:
        notes.append(f"{_n(counts['broken'], 'JSON-LD script')} without FAQPage and not valid JSON: skipped")
    return Imported(format=NAME, records=records, notes=notes)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _key(question: str) -> str:
    return " ".join(question.split()).casefold()


def _is(types: Any, wanted: str) -> bool:
    """Whether a JSON-LD @type or microdata itemtype (a string or a list) names schema.org's `wanted`."""
    names = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    return any(isinstance(t, str) and re.sub(r"^(https?://)?(www\.)?schema\.org/", "", t.strip()) == wanted
               for t in names)


def _json_ld(line: int, text: str, faqs: list[_Faq], problems: list[Row], counts: dict[str, int],
             base: str | None) -> bool:
    """Reads one JSON-LD script's FAQPage questions into `faqs`; whether it held an FAQPage."""
    # a few CMSs still wrap scripts in comment or CDATA markers; blanked, so JSON's lines stay the page's
    body = re.sub(r"^\s*(<!--|//\s*<!\[CDATA\[)|(-->|//\s*\]\]>)\s*$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    too_big = json_container_problem(body)
    if too_big is not None:
        problems.append((line, None, f"this JSON-LD script {too_big}"))
        return True
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        if "FAQPage" not in text:
            counts["broken"] += 1
            return False
        where = line + (exc.lineno - 1 if isinstance(exc, json.JSONDecodeError) else 0)
        problems.append((where, None, f"invalid JSON-LD: {getattr(exc, 'msg', str(exc))}"))
        return True
    find = line_finder(text)
    pos, lost = 0, False
    pages = list(_faq_pages(doc, 0))
    nodes = dict(_identified(doc, 0)) if pages else {}
    for page in pages:
        entities = page.get("mainEntity")
        entities = entities if isinstance(entities, list) else [entities] if entities is not None else []
        if not entities:
            problems.append((line, None, "this FAQPage has no mainEntity Question items"))
        for q in entities:
            q = _resolved(q, nodes)
            if not isinstance(q, dict) or not (_is(q.get("@type"), "Question")
                                               or ("@type" not in q and "name" in q)):
                continue
            question = q.get("name")
            # a name not found as JSON writes it (escaped otherwise) sends the search through the whole script
            # twice: after one, the later questions keep the script's line rather than search it again each
            pattern = json_key_pattern("name", question) if isinstance(question, str) and not lost else None
            at = (find(pattern, pos) or find(pattern, 0)) if pattern else None
            lost = lost or (pattern is not None and at is None)
            q_line, pos = (line + at[0] - 1, at[1]) if at is not None else (line, pos)
            faqs.append(_json_ld_question(q_line, q, nodes, counts, base))
    return bool(pages)


def _faq_pages(node: Any, depth: int):
    """The FAQPage nodes of a JSON-LD document: the node itself, a list's, an @graph's, nested ones."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(node, list):
        for x in node:
            yield from _faq_pages(x, depth + 1)
    elif isinstance(node, dict):
        if _is(node.get("@type"), "FAQPage"):
            yield node
            return
        for value in node.values():
            if isinstance(value, (list, dict)):
                yield from _faq_pages(value, depth + 1)


def _identified(node: Any, depth: int):
    """(@id, node) of every node of a JSON-LD document that says more than its @id: what references such
    as Yoast's `"mainEntity": [{"@id": "...#faq-question-1"}]` point to."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(node, list):
        for x in node:
            yield from _identified(x, depth + 1)
    elif isinstance(node, dict):
        if isinstance(node.get("@id"), str) and len(node) > 1:
            yield node["@id"], node
        for value in node.values():
            if isinstance(value, (list, dict)):
                yield from _identified(value, depth + 1)


def _resolved(node: Any, nodes: dict[str, Any]) -> Any:
    if isinstance(node, dict) and list(node) == ["@id"] and isinstance(node["@id"], str):
        return nodes.get(node["@id"], node)
    return node


def _microdata_question(q: _Item, faqs: list[_Faq], counts: dict[str, int]) -> None:
    counts["suggested"] += len(q.props.get("suggestedAnswer", []))
    names = [v for v in q.props.get("name", []) if isinstance(v, str) and v.strip()]
    accepted = q.props.get("acceptedAnswer", [])
    first = accepted[0] if accepted else None
    if isinstance(first, _Item):
        texts = [v for v in first.props.get("text", []) if isinstance(v, str)]
        first = texts[0] if texts else None
    # microdata text was rendered as the page was read
    faqs.append(_faq(q.line, names[0] if names else None, first, bool(accepted), json_ld=False))


def _json_ld_question(line: int, q: dict[str, Any], nodes: dict[str, Any], counts: dict[str, int],
                      base: str | None) -> _Faq:
    suggested = q.get("suggestedAnswer")
    counts["suggested"] += len(suggested) if isinstance(suggested, list) else 1 if suggested else 0
    accepted = q.get("acceptedAnswer")
    first = _resolved(accepted[0] if isinstance(accepted, list) and accepted else accepted, nodes)
    text = first.get("text") if isinstance(first, dict) else first  # a bare string is the answer's text
    name = q.get("name")
    return _faq(line, html_to_text(name) if isinstance(name, str) else None,
                html_to_text(text, base) if isinstance(text, str) else None, first is not None, json_ld=True)


def _faq(line: int, question: str | None, answer: str | None, accepted: bool, json_ld: bool) -> _Faq:
    question = " ".join(question.split()) if question else ""
    if not question:
        return _Faq(line, "", None, "a Question without a name (its text)", json_ld)
    if not accepted:
        return _Faq(line, question, None, f"Question {question[:60]!r} has no acceptedAnswer", json_ld)
    if not answer or not answer.strip():
        return _Faq(line, question, None, f"Question {question[:60]!r}: its acceptedAnswer has no text", json_ld)
    return _Faq(line, question, answer.strip(), None, json_ld)
