"""models/encoders/words.py `pad_states`, the one padding of per-text word states into a batch, against the
four it replaced (MiniLMText's `pad_token_states`, siamese.py `pad_states`, the analogy scorer's and the
MMAICM scorer's inline loops, copied here as they were): the same tensors on random inputs."""
from __future__ import annotations

import random

import pytest
import torch

from models.encoders.words import pad_states


# ---- the replaced implementations, verbatim but for their names -------------------------------------
def old_pad_token_states(states, device="cpu"):
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


def old_siamese_pad_states(states, dim):
    T = max([1, *(int(s.size(0)) for s in states)])
    x = torch.zeros(len(states), T, dim)
    mask = torch.zeros(len(states), T, dtype=torch.bool)
    for i, s in enumerate(states):
        x[i, : s.size(0)] = s
        mask[i, : s.size(0)] = True
    return x, mask


def old_analogy_inputs(states, dim):
    T = max([1] + [s.size(0) for s in states])
    x = torch.zeros(len(states), T, dim)
    mask = torch.zeros(len(states), T, dtype=torch.bool)
    for i, s in enumerate(states):
        x[i, : s.size(0)] = s
        mask[i, : s.size(0)] = True
    return x, mask


def old_mmaicm_inputs(states, max_len, dim):
    out = torch.zeros(len(states), max_len, dim)
    mask = torch.zeros(len(states), max_len, dtype=torch.bool)
    for i, s in enumerate(states):
        out[i, : s.size(0)] = s
        mask[i, : s.size(0)] = True
    return out, mask


# -------------------------------------------------------------------------------------------------------
def _random_states(rng: random.Random, dim: int, max_len: int, dtype: torch.dtype) -> list[torch.Tensor]:
    n = rng.randint(1, 9)
    return [torch.randn(rng.randint(0, max_len), dim).to(dtype) for _ in range(n)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("seed", range(20))
def test_pad_states_is_every_old_padding(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    dim = rng.choice([1, 5, 50, 384])
    dtype = rng.choice([torch.float32, torch.float16])  # caches hold fp16 states
    max_len = rng.randint(1, 30)
    states = _random_states(rng, dim, max_len, dtype)

    x, mask = pad_states(states)
    old = old_pad_token_states(states)
    assert _same(x, old["token_states"]) and _same(mask, old["mask"])

    x, mask = pad_states(states, dim)
    for old_x, old_mask in (old_siamese_pad_states(states, dim), old_analogy_inputs(states, dim)):
        assert _same(x, old_x) and _same(mask, old_mask)

    length = max_len + rng.randint(0, 5)
    x, mask = pad_states(states, dim, length=length)
    old_x, old_mask = old_mmaicm_inputs(states, length, dim)
    assert _same(x, old_x) and _same(mask, old_mask)


def test_all_empty_texts_and_empty_batches():
    empty = [torch.zeros(0, 4), torch.zeros(0, 4)]
    x, mask = pad_states(empty)
    assert _same(x, old_pad_token_states(empty)["token_states"]) and x.shape == (2, 1, 4) and not mask.any()
    for got, old in ((pad_states([], 4), old_siamese_pad_states([], 4)),
                     (pad_states([], 4, length=6), old_mmaicm_inputs([], 6, 4))):
        assert _same(got[0], old[0]) and _same(got[1], old[1])
    with pytest.raises(ValueError, match="no sentences"):
        pad_states([])


def test_a_text_longer_than_a_fixed_length_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        pad_states([torch.zeros(7, 3)], 3, length=6)
