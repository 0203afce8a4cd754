"""Which language a query is written in, offline: `detect(text) -> Detection` (ISO 639-1 codes).

The identifier is py3langid (BSD-3-Clause; langid.py's naive Bayes over byte n-grams, its model inside the
wheel, nothing downloaded), asked to choose among `SUPPORTED` only: the fewer languages it weighs, the fewer
short queries it confuses. Chat queries are short, lowercase, without accents and full of brand names, so a
detection carries the probability of every candidate and its word count, and the callers decide what a weak
one may change (a KB's `languages` gate refuses only what is clearly another language: `is_foreign`).

Two things are settled before (and beside) the identifier, which only knows Latin-script n-grams of the
supported languages and otherwise picks whichever of them a stray byte resembles:
  the script  every supported language is written in Latin letters. Text most of whose letters are in another
              script (Japanese, Chinese, Hebrew, Cyrillic, Arabic, Hangul, Greek...) is none of them: the
              process's detector (`detect`) names its language among those written in that script, from
              py3langid's full model (UNDETERMINED when it knows none), and every `languages` gate refuses
              it, however few its words (its words need no spaces between them).
  names       a capitalised word with letters outside ASCII (Müller, Düsseldorf, Zoë) is often a name or
              a borrowed word in another language's text, and its n-grams outweigh several plain words
              ("Jürgen Müller refund status" reads as German). When the other words say, clearly, another
              language in which the whole text's is implausible, the text is in theirs; and a gate refuses a
              text for its language only when its other words are enough to judge and foreign too.

Chosen over lingua (`lingua-language-detector`) on the realistic sets' queries in English, Spanish, German
and French (docs/results.md): more of them right (99.5% of those of 3+ words against lingua's 99.1% in its
high-accuracy mode and 96.2% in its low one), 0.06 ms a query, and about 100 MB less memory than lingua's
high-accuracy models. The script and name checks are measured in docs/results.md ("Language identification:
other scripts, names, mixed queries") with `faq eval language-id`.
"""
from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

#: the languages a query is recognised in: those the multilingual encoder was trained on that also have a
#: stemmer in the lexical arm (tantivy's and Elasticsearch's analyzers), ISO 639-1
SUPPORTED: tuple[str, ...] = ("en", "es", "de", "fr", "it", "pt", "nl")
#: a query shorter than this many words is too short to refuse for its language (the identifier's error
#: rate on one- and two-word chat messages is several times its rate on longer ones)
MIN_WORDS_TO_REFUSE = 3
#: a detection is taken as another language only when none of the allowed ones gets this much confidence
ALLOWED_FLOOR = 0.12
#: the language of text in another script whose language py3langid cannot name (BCP 47's "undetermined")
UNDETERMINED = "und"
#: ISO 15924 code of the script every supported language is written in
LATIN = "Latn"
#: the words other than names decide a text's language when they give theirs at least this probability and
#: the whole text's at most NAME_FLOOR: only a clear majority overrules what the names' letters suggest
NAME_SWITCH = 0.9
NAME_FLOOR = 0.05

#: first word of a letter's Unicode name -> its ISO 15924 script (Japanese and Korean text mixes Han in)
_SCRIPT_OF_NAME = {
    "CJK": "Hani", "IDEOGRAPHIC": "Hani", "HIRAGANA": "Jpan", "KATAKANA": "Jpan", "KATAKANA-HIRAGANA": "Jpan",
    "HANGUL": "Kore", "CYRILLIC": "Cyrl", "GREEK": "Grek", "HEBREW": "Hebr", "ARABIC": "Arab",
    "DEVANAGARI": "Deva", "BENGALI": "Beng", "THAI": "Thai", "GEORGIAN": "Geor", "ARMENIAN": "Armn",
    "ETHIOPIC": "Ethi", "KHMER": "Khmr", "LAO": "Laoo", "MALAYALAM": "Mlym", "TAMIL": "Taml", "TELUGU": "Telu",
    "KANNADA": "Knda", "GUJARATI": "Gujr", "GURMUKHI": "Guru", "ORIYA": "Orya", "SINHALA": "Sinh",
    "TIBETAN": "Tibt", "MYANMAR": "Mymr", "MONGOLIAN": "Mong",
}
#: the ISO 639-1 languages py3langid knows in each script: a text in that script is named one of them
_LANGUAGES_OF_SCRIPT = {
    "Jpan": ("ja",), "Kore": ("ko",), "Hani": ("zh", "ja"), "Grek": ("el",), "Hebr": ("he",),
    "Cyrl": ("ru", "uk", "bg", "sr", "mk", "be", "kk", "ky", "mn", "tg", "tt", "ba"),
    "Arab": ("ar", "fa", "ur", "ps", "ug", "ku"), "Deva": ("hi", "mr", "ne", "sa"), "Beng": ("bn", "as"),
    "Thai": ("th",), "Geor": ("ka",), "Armn": ("hy",), "Ethi": ("am",), "Khmr": ("km",), "Laoo": ("lo",),
    "Mlym": ("ml",), "Taml": ("ta",), "Telu": ("te",), "Knda": ("kn",), "Gujr": ("gu",), "Guru": ("pa",),
    "Orya": ("or",), "Sinh": ("si",), "Tibt": ("dz",), "Mymr": ("my",), "Mong": ("mn",),
}
#: a word: letters, with apostrophes inside ("n'arrive", "Jürgen's")
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")


def _is_latin(ch: str) -> bool:
    cp = ord(ch)
    # Basic Latin to Latin Extended-B, IPA and modifier letters; Latin Extended Additional (Vietnamese),
    # -C, -D and -E (NFKC has already made fullwidth and styled letters plain)
    return (cp < 0x300 or 0x1E00 <= cp <= 0x1EFF or 0x2C60 <= cp <= 0x2C7F or 0xA720 <= cp <= 0xA7FF
            or 0xAB30 <= cp <= 0xAB6F)


def script_of(text: str) -> tuple[str | None, int]:
    """The ISO 15924 code of most of `text`'s letters (LATIN, another, "Zzzz" for a script this module does not
    name) and how many letters are in it; (None, 0) for text without letters. Ties go to Latin."""
    counts: Counter[str] = Counter()
    for ch in unicodedata.normalize("NFKC", text):
        if not ch.isalpha():
            continue
        if _is_latin(ch):
            counts[LATIN] += 1
        else:
            counts[_SCRIPT_OF_NAME.get(unicodedata.name(ch, "").split(" ")[0], "Zzzz")] += 1
    if not counts:
        return None, 0
    latin = counts.pop(LATIN, 0)
    # Japanese writes its words in Han and kana, Korean sometimes puts Han among Hangul
    for mixed in ("Jpan", "Kore"):
        if counts[mixed] and counts["Hani"]:
            counts[mixed] += counts.pop("Hani")
    other, n = counts.most_common(1)[0] if counts else (LATIN, 0)
    # one stray letter (a "π", an "Ω") makes no text foreign
    if n > latin and sum(counts.values()) >= 2:
        return other, n
    return LATIN, latin


@dataclass(frozen=True)
class NamesAside:
    """The text with its possible names set aside: how many words are left, their languages' probabilities,
    and whether the words set aside are surely names (not merely a capitalised first word: "Cómo ...")."""

    words: int
    scores: dict[str, float]
    sure: bool


@dataclass(frozen=True)
class Detection:
    language: str  # ISO 639-1 code of the most likely language (UNDETERMINED: another script, unnamed)
    confidence: float  # its share of the identifier's confidence, 0..1
    words: int  # whitespace-separated words in the text
    scores: dict[str, float] = field(default_factory=dict)  # every candidate language's confidence
    script: str | None = LATIN  # ISO 15924 code of most of its letters (None: no letters)
    names_aside: NamesAside | None = None  # the text without its possible names (None: it has none)

    @property
    def supported(self) -> bool:
        """Whether the text is in a script the supported languages are written in (or has no letters)."""
        return self.script in (LATIN, None)

    def is_foreign(self, allowed: tuple[str, ...] | list[str] | frozenset[str] | set[str]) -> bool:
        """True when the text is clearly in none of `allowed`: in another script than theirs, or long enough
        to judge, its best language outside them, and no allowed one a plausible reading, neither of the
        whole text nor of its words other than names (a short or mixed message stays answered)."""
        if not allowed:
            return False
        if not self.supported:
            return True
        if self.language in allowed or self.words < MIN_WORDS_TO_REFUSE:
            return False
        if max((self.scores.get(code, 0.0) for code in allowed), default=0.0) >= ALLOWED_FLOOR:
            return False
        aside = self.names_aside
        if aside is not None:
            # "Jürgen Müller refund status": what is foreign may be the names alone; the other words judge
            if aside.words == 0 or (aside.sure and aside.words < MIN_WORDS_TO_REFUSE):
                return False
            if max((aside.scores.get(code, 0.0) for code in allowed), default=0.0) >= ALLOWED_FLOOR:
                return False
        return True


def _is_name(words: list[str], i: int) -> bool:
    """Whether word `i` may be a name: capitalised (not shouted in capitals), with a letter outside ASCII."""
    w = words[i]
    return not w.isascii() and w[0].isupper() and not w.isupper()


def _surely_name(words: list[str], i: int) -> bool:
    """A possible name that is not merely the text's capitalised first word: inside the text, an English
    possessive ("Renée's"), or the first of two capitalised words ("Jürgen Müller")."""
    w = words[i]
    return i > 0 or w.endswith(("'s", "’s")) or (len(words) > 1 and words[1][:1].isupper())


class LanguageDetector:
    """py3langid restricted to `languages`; thread-safe (a detection only reads the model), built once per
    process by `detector()`. With `other_scripts`, text in another script is named for its own language
    (Detection.language outside `languages`); without, every detection is one of `languages`, as the lexical
    arm's analyzers need (index/lexical.py), and only its `script` tells."""

    def __init__(self, languages: tuple[str, ...] = SUPPORTED, *, other_scripts: bool = False):
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        unknown = [c for c in languages if c not in SUPPORTED]
        if unknown:
            raise ValueError(f"languages {unknown} are not supported; the supported ones are {', '.join(SUPPORTED)}")
        self.languages = tuple(languages)
        self.other_scripts = other_scripts
        full = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=False)
        # the restricted one shares the full model's tables (it keeps its own copy of its languages' columns)
        self._identifier = LanguageIdentifier(full.nb_ptc, full.nb_pc, full.nb_classes, full.tk_nextmove,
                                              full.tk_output, norm_probs=False, tk_row=full.tk_row)
        self._identifier.set_languages(list(self.languages))
        # another script's languages are weighed by the full model, only for text in another script
        self._full = full
        known = set(full.labels)
        self._of_script = {script: tuple(c for c in codes if c in known)
                           for script, codes in _LANGUAGES_OF_SCRIPT.items()}

    def _scores(self, text: str) -> dict[str, float]:
        """Each of `languages`' probability for `text` (softmax of the identifier's log-probabilities)."""
        ranked = self._identifier.rank(text)
        top = ranked[0][1]
        weights = {code: math.exp(score - top) for code, score in ranked}
        total = sum(weights.values())
        return {code: w / total for code, w in weights.items()}

    def _named(self, text: str, script: str) -> tuple[str, float]:
        """The language of text in `script` (not Latin) among those py3langid knows in it, and its share."""
        candidates = self._of_script.get(script, ())
        ranked = [(code, score) for code, score in self._full.rank(text) if code in candidates]
        if not ranked:
            return UNDETERMINED, 0.0
        top = ranked[0][1]
        total = sum(math.exp(score - top) for _, score in ranked)
        return ranked[0][0], round(1.0 / total, 4)

    def detect(self, text: str) -> Detection:
        words = len(text.split())
        if text.isascii():  # most chat queries: Latin letters and no names with accents, nothing to work out
            script: str | None = LATIN if any(ch.isalpha() for ch in text) else None
        else:
            # fullwidth, styled (𝐡𝐞𝐥𝐥𝐨) and ligature letters are plain ones to a reader, and to the identifier so
            text = unicodedata.normalize("NFKC", text)
            script, _ = script_of(text)  # (normalising again is a no-op)
        if script is None:  # digits, emoji, punctuation: nothing to tell
            return Detection("en", 0.0, words, {}, None)
        if script != LATIN and self.other_scripts:
            language, confidence = self._named(text, script)
            return Detection(language, confidence, words, {language: confidence}, script)
        scores = self._scores(text)
        best = max(scores, key=scores.__getitem__)
        aside = None
        found = [] if text.isascii() else _WORD.findall(text)
        names = [i for i in range(len(found)) if _is_name(found, i)]
        if names and script == LATIN:
            rest = [w for i, w in enumerate(found) if i not in names]
            aside = NamesAside(len(rest), self._scores(" ".join(rest)) if rest else {},
                               any(_surely_name(found, i) for i in names))
            sure = [i for i in names if _surely_name(found, i)]
            if sure:
                rest = [w for i, w in enumerate(found) if i not in sure]
                others = self._scores(" ".join(rest)) if rest else {}
                theirs = max(others, key=others.__getitem__) if others else best
                if theirs != best and others[theirs] >= NAME_SWITCH and others.get(best, 0.0) < NAME_FLOOR:
                    # "Müller & Söhne invoice copy": the words other than the names are the text's language
                    best, scores = theirs, others
        return Detection(best, round(scores[best], 4), words, scores, script, aside)


_DETECTOR: LanguageDetector | None = None
_LOCK = threading.Lock()


def detector() -> LanguageDetector:
    """The process's detector (its models take a second and a few hundred MB to load: once); it names text in
    another script for its own language."""
    global _DETECTOR
    with _LOCK:
        if _DETECTOR is None:
            _DETECTOR = LanguageDetector(other_scripts=True)
        return _DETECTOR


def detect(text: str) -> Detection:
    return detector().detect(text)
