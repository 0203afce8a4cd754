"""Text -> tensors for MSEM: normalisation, a GloVe-compatible tokeniser, word and char vocabularies.

What lives here:
- `normalise(text)`: Unicode NFKC, typographic quotes/dashes made ASCII, accents stripped, lower-cased,
  whitespace collapsed. GloVe 6B is lower-cased, so casing carries nothing we could look up.
- `tokenize(text)`: words, numbers, abbreviations and punctuation as separate tokens, with English
  clitics split the way GloVe's (Stanford/PTB) tokeniser split them: "don't" -> "do" "n't",
  "can't" -> "ca" "n't", "it's" -> "it" "'s".
- `TextEncoder`: word vocabulary (`<pad>`=0, `<unk>`=1, then words that learn their own vector, then
  GloVe words) + character vocabulary (`<pad>`=0, `<unk>`=1) -> `(word_ids, char_ids, mask)` batches.

Its token-state counterpart (a base transformer's wordpieces and frozen states) is `MiniLMText` in
models/encoders/words.py; both share the batching interface `MsemEncoder` and the trainer use.

Compounds ("covid-19", "o'neill") stay one token in `tokenize`; `TextEncoder` keeps a compound whole
when it is in the vocabulary and otherwise splits it at the hyphen/apostrophe, so "e-mail" keeps its
GloVe vector while an unknown "covid-19" becomes "covid" "-" "19" instead of one `<unk>`.
"""
from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import torch

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
TEXT_FORMAT_VERSION = 1
TEXT_META_FILE = "text.json"
MINILM_NAME = "all-MiniLM-L6-v2"

# Typographic characters NFKC leaves alone but GloVe spells in ASCII (the apostrophe matters most:
# "don’t" must split like "don't").
_ASCII_PUNCT = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u00b4": "'", "`": "'",
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
        "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-",
        "\u2026": "...",
    }
)

_TOKEN_RE = re.compile(
    r"""
      (?:[^\W\d_]\.){2,}                    # abbreviations: u.s. e.g. i.e. a.m.
    | \d{1,3}(?:,\d{3})+(?:\.\d+)?          # 1,000  12,500.75
    | \d+\.\d+                              # 3.5
    | [^\W_]+(?:[-'][^\W_]+)*               # words / numbers / compounds: don't e-mail covid-19 10am
    | \.\.\.                                # ellipsis is one GloVe token
    | \S                                    # anything else: one punctuation or symbol token
    """,
    re.VERBOSE,
)
_CLITIC_RE = re.compile(r"^(.+?)('s|'re|'ll|'ve|'d|'m)$")


def normalise(text: str) -> str:
    """NFKC, ASCII quotes/dashes, accents stripped (NFKD then drop combining marks), lower-case.

    "Café ‘Naïve’ FAQ" -> "cafe 'naive' faq". Non-Latin scripts pass through (recomposed with NFC after
    the marks are dropped), although GloVe 6B knows little of them.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    text = unicodedata.normalize("NFKC", text).translate(_ASCII_PUNCT)
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    text = unicodedata.normalize("NFC", stripped).lower()
    return " ".join(text.split())


def _split_clitics(token: str) -> list[str]:
    if "'" not in token:
        return [token]
    if token.endswith("n't") and len(token) > 3:  # don't -> do n't, can't -> ca n't (as in GloVe)
        return [token[:-3], "n't"]
    m = _CLITIC_RE.match(token)
    if m:
        return [m.group(1), m.group(2)]
    return [token]  # o'neill, rock'n'roll: a compound, split later only if unknown


def tokenize(text: str) -> list[str]:
    """Normalise and split into GloVe-style tokens.

    >>> tokenize("Don't you LOVE the café's Wi-Fi?! It costs $3.50 (U.S.)...")
    ['do', "n't", 'you', 'love', 'the', 'cafe', "'s", 'wi-fi', '?', '!', 'it', 'costs', '$', '3.50', '(', 'u.s.', ')', '...']
    """
    tokens: list[str] = []
    for match in _TOKEN_RE.finditer(normalise(text)):
        tokens.extend(_split_clitics(match.group(0)))
    return tokens


def split_compound(token: str) -> list[str]:
    """'covid-19' -> ['covid', '-', '19']; tokens without a hyphen/apostrophe come back unchanged."""
    parts = [p for p in re.split(r"([-'])", token) if p]
    return parts or [token]


class TextEncoder:
    """Word and character vocabularies and the batching that turns texts into model inputs.

    Word ids: 0 `<pad>`, 1 `<unk>`, then `n_learned_words - 2` training words that have no GloVe vector
    (they learn one), then GloVe words. The model keeps ids below `n_learned_words` trainable and ids at
    or above it frozen when `MsemConfig.freeze_word` is set.
    """

    def __init__(
        self,
        word_vocab: Sequence[str],
        char_vocab: Sequence[str],
        n_learned_words: int = 2,
        max_word_len: int = 16,
    ):
        word_vocab, char_vocab = list(word_vocab), list(char_vocab)
        if word_vocab[:2] != [PAD, UNK]:
            raise ValueError(f"word_vocab must start with {PAD!r}, {UNK!r}; got {word_vocab[:2]}")
        if char_vocab[:2] != [PAD, UNK]:
            raise ValueError(f"char_vocab must start with {PAD!r}, {UNK!r}; got {char_vocab[:2]}")
        if len(set(word_vocab)) != len(word_vocab):
            raise ValueError("word_vocab has duplicate entries")
        if len(set(char_vocab)) != len(char_vocab):
            raise ValueError("char_vocab has duplicate entries")
        if any(len(c) != 1 for c in char_vocab[2:]):
            raise ValueError("char_vocab entries after <pad>, <unk> must be single characters")
        if not 2 <= n_learned_words <= len(word_vocab):
            raise ValueError(f"n_learned_words must be in [2, {len(word_vocab)}], got {n_learned_words}")
        if max_word_len < 1:
            raise ValueError(f"max_word_len must be >= 1, got {max_word_len}")
        self.word_vocab = word_vocab
        self.char_vocab = char_vocab
        self.n_learned_words = n_learned_words
        self.max_word_len = max_word_len
        self.word_to_id = {w: i for i, w in enumerate(word_vocab)}
        self.char_to_id = {c: i for i, c in enumerate(char_vocab)}

    # ---- building -------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        glove_words: Sequence[str],
        max_words: int = 50_000,
        *,
        min_count: int = 2,
        glove_top_n: int = 0,
        max_chars: int = 300,
        max_word_len: int = 16,
    ) -> "TextEncoder":
        """Vocabulary for a training corpus.

        - every GloVe word seen in `texts`, plus training words missing from GloVe seen at least
          `min_count` times (these learn a vector), most frequent first, at most `max_words` in all;
        - then, if room is left, the `glove_top_n` most frequent GloVe words (GloVe's own order) so that
          serving-time queries with words absent from training still get a pretrained vector;
        - characters of the training tokens seen at least once, most frequent first, at most `max_chars`.
        """
        if max_words < 3:
            raise ValueError(f"max_words must be >= 3, got {max_words}")
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        glove_set = set(glove_words)
        word_counts: Counter[str] = Counter()
        char_counts: Counter[str] = Counter()
        for text in texts:
            for token in tokenize(text):
                pieces = [token] if token in glove_set else split_compound(token)
                word_counts.update(pieces)
                for piece in pieces:
                    char_counts.update(piece[:max_word_len])
        kept = [
            w for w, n in sorted(word_counts.items(), key=lambda kv: (-kv[1], kv[0]))
            if w in glove_set or n >= min_count
        ][: max_words - 2]
        learned = [w for w in kept if w not in glove_set]
        pretrained = [w for w in kept if w in glove_set]
        room = max_words - 2 - len(kept)
        if glove_top_n > 0 and room > 0:
            taken = set(pretrained)
            extra = [w for w in glove_words[:glove_top_n] if w not in taken and w not in (PAD, UNK)]
            pretrained.extend(extra[:room])
        chars = [c for c, _ in sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0]))][: max(0, max_chars - 2)]
        return cls(
            [PAD, UNK, *learned, *pretrained],
            [PAD, UNK, *chars],
            n_learned_words=2 + len(learned),
            max_word_len=max_word_len,
        )

    # ---- text -> ids ----------------------------------------------------------------------------
    def tokens(self, text: str) -> list[str]:
        """`tokenize`, with unknown compounds split into their parts."""
        out: list[str] = []
        for token in tokenize(text):
            if token in self.word_to_id:
                out.append(token)
            else:
                out.extend(split_compound(token))
        return out

    def word_ids(self, tokens: Sequence[str]) -> list[int]:
        get = self.word_to_id.get
        return [get(t, UNK_ID) for t in tokens]

    def char_ids(self, token: str) -> list[int]:
        get = self.char_to_id.get
        return [get(c, UNK_ID) for c in token[: self.max_word_len]]

    def batch(self, texts: Sequence[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Texts -> (word_ids (B,T) long, char_ids (B,T,C) long, mask (B,T) bool), left-aligned.

        T = longest sentence in the batch capped at `max_len` (longer sentences keep their first
        `max_len` tokens); C = longest word capped at `max_word_len`. An empty text has an all-False
        mask row (the model reads it as one padding token).
        """
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        token_lists = [self.tokens(t)[:max_len] for t in texts]
        return self.batch_tokens(token_lists)

    def batch_tokens(self, token_lists: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Already tokenised (and truncated) sentences -> the tensors of `batch`."""
        n = len(token_lists)
        T = max([len(t) for t in token_lists] + [1])
        C = min(max([len(w) for t in token_lists for w in t] + [1]), self.max_word_len)
        # build padded Python lists and convert once: per-row tensor writes dominate otherwise
        word_rows, char_rows, lengths = [], [], []
        pad_word_chars = [PAD_ID] * C
        for toks in token_lists:
            ids = self.word_ids(toks)
            word_rows.append(ids + [PAD_ID] * (T - len(ids)))
            chars = [(self.char_ids(tok) + pad_word_chars)[:C] for tok in toks]
            char_rows.append(chars + [pad_word_chars] * (T - len(chars)))
            lengths.append(len(toks))
        word_ids = torch.tensor(word_rows, dtype=torch.long).reshape(n, T)
        char_ids = torch.tensor(char_rows, dtype=torch.long).reshape(n, T, C)
        mask = torch.arange(T).unsqueeze(0) < torch.tensor(lengths, dtype=torch.long).unsqueeze(1)
        return word_ids, char_ids, mask

    # ---- the batching interface shared with MiniLMText ---------------------------------------------
    def prepare(self, texts: Sequence[str], max_len: int) -> list[list[str]]:
        """Texts -> token lists (unknown compounds split), each cut to `max_len` tokens."""
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        return [self.tokens(t)[:max_len] for t in texts]

    def batch_inputs(
        self, texts: Sequence[str], items: Sequence[Sequence[str]] | None = None, device: str | torch.device = "cpu"
    ) -> dict[str, torch.Tensor]:
        """`MSEM.forward` keyword inputs {word_ids, char_ids, mask} for `items` (from `prepare`); `texts`
        is only tokenised when `items` is None (untruncated: the model keeps the first max_len tokens)."""
        token_lists = items if items is not None else [self.tokens(t) for t in texts]
        word_ids, char_ids, mask = self.batch_tokens(token_lists)
        nb = str(device) != "cpu"
        return {
            "word_ids": word_ids.to(device, non_blocking=nb),
            "char_ids": char_ids.to(device, non_blocking=nb),
            "mask": mask.to(device, non_blocking=nb),
        }

    # ---- persistence ----------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """words.txt and chars.txt (one entry a line, id = line number) + text.json (the rest)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, vocab in (("words.txt", self.word_vocab), ("chars.txt", self.char_vocab)):
            bad = [v for v in vocab if "\n" in v or "\r" in v or v != v.strip() or not v]
            if bad:
                raise ValueError(f"{name}: entries with whitespace at the ends or line breaks: {bad[:5]!r}")
            (directory / name).write_text("\n".join(vocab) + "\n", encoding="utf-8")
        meta = {
            "format_version": TEXT_FORMAT_VERSION,
            "kind": "glove_char",
            "n_learned_words": self.n_learned_words,
            "max_word_len": self.max_word_len,
        }
        (directory / TEXT_META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path) -> "TextEncoder":
        directory = Path(directory)
        vocabs = {}
        for name in ("words.txt", "chars.txt"):
            path = directory / name
            if not path.exists():
                raise FileNotFoundError(f"{path}: missing vocabulary file")
            vocabs[name] = path.read_text(encoding="utf-8").split("\n")[:-1]
        meta = read_text_meta(directory / TEXT_META_FILE)
        return cls(
            vocabs["words.txt"],
            vocabs["chars.txt"],
            n_learned_words=int(meta.get("n_learned_words", 2)),
            max_word_len=int(meta.get("max_word_len", 16)),
        )

    def __repr__(self) -> str:
        return (
            f"TextEncoder(words={len(self.word_vocab)}, learned={self.n_learned_words}, "
            f"chars={len(self.char_vocab)}, max_word_len={self.max_word_len})"
        )


def read_text_meta(path: Path) -> dict:
    """A saved TextEncoder's meta file ({} when absent); ValueError for a format this code cannot read."""
    meta = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    version = meta.get("format_version", TEXT_FORMAT_VERSION)
    if version != TEXT_FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {version} unsupported (expected {TEXT_FORMAT_VERSION})")
    return meta
