"""A KB's synonyms: groups of terms that mean the same thing here ("wifi", "wi-fi", "wireless internet").

Like Azure question answering's alterations, they act on the query: each term of a group found in the
query (whole words, any case) is replaced by the group's canonical term, the one the KB's own phrasings
and answers use most, so both the encoder and BM25 see the KB's words. Nothing about the KB changes;
the canonical terms are worked out again for each KB snapshot (`SynonymRewriter.for_texts`).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def _pattern(term: str) -> str:
    # a term is matched as whole words, its inner spaces as any run of spaces
    words = [re.escape(w) for w in term.split()]
    return r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)"


class SynonymRewriter:
    """Rewrites queries with `groups` (lists of terms; kb/formats/base.py `synonym_problem` checks them)."""

    def __init__(self, groups: Sequence[Sequence[str]]):
        self.groups = [list(g) for g in groups if len(g) >= 2]
        self._patterns = [[re.compile(_pattern(t), re.IGNORECASE) for t in g] for g in self.groups]

    def canonical(self, texts: Iterable[str]) -> list[str]:
        """Each group's term the KB `texts` use most (the first term on a tie or when none is used)."""
        joined = "\n".join(texts)
        out = []
        for group, patterns in zip(self.groups, self._patterns):
            counts = [len(p.findall(joined)) for p in patterns]
            out.append(group[max(range(len(group)), key=lambda i: (counts[i], -i))])
        return out

    def for_texts(self, texts: Iterable[str]) -> "BoundRewriter":
        return BoundRewriter(self, self.canonical(texts))


class BoundRewriter:
    """A rewriter with its canonical terms chosen for one KB snapshot: one pass over the query, longest
    term first, so "wireless internet" is taken whole before a shorter "internet" of another group, and a
    canonical term already in the query is left as it is."""

    def __init__(self, rewriter: SynonymRewriter, canonical: list[str]):
        self._to: dict[str, str] = {}
        for group, c in zip(rewriter.groups, canonical):
            for term in group:
                self._to.setdefault(_key(term), c)
        terms = sorted({t for g in rewriter.groups for t in g}, key=lambda t: -len(t))
        changes = any(_key(t) != _key(c) for g, c in zip(rewriter.groups, canonical) for t in g)
        self._pattern = (re.compile("|".join(_pattern(t) for t in terms), re.IGNORECASE)
                         if terms and changes else None)

    def __call__(self, query: str) -> str:
        if self._pattern is None:
            return query
        return self._pattern.sub(lambda m: self._to.get(_key(m.group(0)), m.group(0)), query)


def _key(term: str) -> str:
    return " ".join(term.lower().split())
