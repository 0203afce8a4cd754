"""The model an MSEM run starts from besides a fresh one: `--config` overrides of MsemConfig, and `--init`
of a trained folder (a GloVe model's vocabulary extended with the new data's words, or a token-state
model's heads re-created)."""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from models.encoders.msem.encoder import MsemEncoder, init_minilm_layers
from models.encoders.msem.model import MSEM, MsemConfig
from models.text import TextEncoder, split_compound, tokenize
from training.loop import TrainError, config_overrides

#: fields of MsemConfig that shape the weights; `--init` keeps the loaded model's values for them
ARCHITECTURE_FIELDS = {
    "word_dim", "char_dim", "char_filters", "char_kernel", "max_word_len", "hidden", "heads", "max_len",
    "ffn_dim", "pool_heads_r", "pool_da", "highway_layers", "out_dim", "use_aru", "aru_as_mha", "pooling",
    "use_highway", "use_char", "word_repr",
}

def parse_config_overrides(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """--config: a JSON object literal or a path to a JSON file -> dict of MsemConfig fields."""
    return config_overrides(value, MsemConfig)


def reconfigure_heads(encoder: MsemEncoder, config_updates: Mapping[str, Any]) -> MsemEncoder:
    """`--init` for the minilm variant: MiniLM's wordpiece vocabulary is fixed, so there is nothing to
    extend; a copy of `encoder` with `config_updates` applied (n_intents: the intent head is re-created)
    and every other weight copied."""
    old_cfg = encoder.model.config
    bad_arch = sorted(k for k, v in config_updates.items() if k in ARCHITECTURE_FIELDS and getattr(old_cfg, k) != v)
    if bad_arch:
        raise TrainError(f"--config cannot change architecture fields of an --init model: {bad_arch}")
    new_cfg = dataclasses.replace(old_cfg, **dict(config_updates))
    if old_cfg.minilm_train_layers and new_cfg.minilm_train_layers != old_cfg.minilm_train_layers:
        raise TrainError(f"--config minilm_train_layers={new_cfg.minilm_train_layers}: the --init model already trains "
                         f"{old_cfg.minilm_train_layers} MiniLM layers (only a model with none can add them)")
    model = MSEM(new_cfg)
    state = {k: v for k, v in encoder.model.state_dict().items() if not k.startswith("intent_head.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or {m for m in missing if not m.startswith("embed.top.")} - {"intent_head.weight", "intent_head.bias"}:
        raise TrainError(f"--init weights do not fit: missing {missing}, unexpected {unexpected}")
    if not old_cfg.minilm_train_layers and new_cfg.minilm_train_layers:
        # MiniLM's own top layers: the model computes exactly what --init computed, then trains them
        init_minilm_layers(model, encoder.text)
    return MsemEncoder(model, encoder.text, device=encoder.device, name=encoder.name)


def extend_vocabulary(
    encoder: MsemEncoder,
    texts: Sequence[str],
    config_updates: Mapping[str, Any],
    glove: Any = None,
    min_count: int = 2,
) -> tuple[MsemEncoder, dict[str, int]]:
    """A copy of `encoder` whose vocabularies also hold the new words/characters of `texts` (GloVe
    words get their GloVe vector, other words seen `min_count` times a random learned one) and
    whose config has `config_updates` applied (n_intents: the intent head is re-created).

    Word ids are rearranged ([<pad>, <unk>, old learned, new learned, old GloVe, new GloVe]) because
    learned ids must precede GloVe ids; the embedding rows move with them, so old words keep their
    vectors. All other weights are copied unchanged.
    """
    from models.glove import load_glove

    glove = glove if glove is not None else load_glove()
    old_text, old_model = encoder.text, encoder.model
    old_cfg = old_model.config
    known = old_text.word_to_id
    glove_index = glove.index
    counts: Counter[str] = Counter()
    char_counts: Counter[str] = Counter()
    for text in texts:
        for token in tokenize(text):
            pieces = [token] if (token in known or token in glove_index) else split_compound(token)
            counts.update(pieces)
            for piece in pieces:
                char_counts.update(piece[: old_text.max_word_len])
    new_words = [w for w, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if w not in known]
    new_learned = [w for w in new_words if w not in glove_index and counts[w] >= min_count]
    new_glove = [w for w in new_words if w in glove_index]
    new_chars = sorted((c for c in char_counts if c not in old_text.char_to_id), key=lambda c: (-char_counts[c], c))

    n_old_learned = old_text.n_learned_words
    old_learned_words = old_text.word_vocab[:n_old_learned]
    old_glove_words = old_text.word_vocab[n_old_learned:]
    word_vocab = [*old_learned_words, *new_learned, *old_glove_words, *new_glove]
    char_vocab = [*old_text.char_vocab, *new_chars]
    text = TextEncoder(word_vocab, char_vocab, n_learned_words=n_old_learned + len(new_learned),
                       max_word_len=old_text.max_word_len)

    with torch.no_grad():
        old_vectors = torch.cat([old_model.embed.word_learned.detach().cpu(),
                                 old_model.embed.word_pretrained.detach().cpu()])
        std = float(old_vectors[n_old_learned:].std()) if len(old_glove_words) > 1 else 0.1
        learned_init = torch.randn(len(new_learned), old_cfg.word_dim) * std
        glove_rows, _ = glove.lookup(new_glove) if new_glove else (np.zeros((0, old_cfg.word_dim), np.float32), None)
        vectors = torch.cat([
            old_vectors[:n_old_learned], learned_init, old_vectors[n_old_learned:],
            torch.from_numpy(np.asarray(glove_rows, dtype=np.float32)),
        ])
    bad_arch = sorted(k for k, v in config_updates.items() if k in ARCHITECTURE_FIELDS and getattr(old_cfg, k) != v)
    if bad_arch:
        raise TrainError(f"--config cannot change architecture fields of an --init model: {bad_arch}")
    cfg = dataclasses.replace(
        old_cfg,
        word_vocab_size=len(word_vocab),
        char_vocab_size=len(char_vocab),
        n_learned_words=text.n_learned_words,
        **dict(config_updates),
    )
    model = MSEM(cfg, vectors)
    state = {k: v for k, v in old_model.state_dict().items()
             if not k.startswith(("embed.word_", "intent_head."))}
    old_chars = state.pop("embed.chars.embed.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed_missing = {"embed.word_learned", "embed.word_pretrained", "embed.chars.embed.weight",
                       "intent_head.weight", "intent_head.bias"}
    if unexpected or set(missing) - allowed_missing:
        raise TrainError(f"--init weights do not fit: missing {sorted(set(missing) - allowed_missing)}, "
                         f"unexpected {unexpected}")
    if old_chars is not None and model.embed.chars is not None:
        with torch.no_grad():
            model.embed.chars.embed.weight[: old_chars.shape[0]] = old_chars
    stats = {"new_learned_words": len(new_learned), "new_glove_words": len(new_glove), "new_chars": len(new_chars)}
    return MsemEncoder(model, text, device=encoder.device, name=encoder.name), stats
