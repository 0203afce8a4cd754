"""Retrieval arms and the online A/B split.

Four arms answer `/match` (and are compared by `faq eval ab`):

| arm              | recall stage                                    | final score                              |
|------------------|-------------------------------------------------|------------------------------------------|
| `ann`            | Annoy over the encoder's vectors                | decision model's P(right) (app/decision) |
| `ann+rerank`     | the same, top `rerank_k` FAQs                   | the re-ranking stages' pooled probability|
| `lexical`        | BM25 top-K FAQs (K = 30; index/lexical.py)      | the same, over the BM25 candidates       |
| `lexical+rerank` | the same, top `rerank_k` FAQs                   | the re-ranking stages' pooled probability|

`lexical` is the paper's baseline (Elasticsearch recalls 30 candidates, MSEM re-ranks them): the BM25
candidates' variants are scored with the SAME stored vectors and calibration the `ann` arm uses, so
the two arms differ only in their recall stage.

The online split (`FAQ_AB_SPLIT="ann:90,lexical:10"`) assigns an arm per request from a hash of its
`session_id`, so a session always gets the same arm (sticky), independent of process and restart.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from app.settings import ARMS, Settings, split_weights

__all__ = ["ARMS", "ArmSplit", "arm_split", "base_arm", "parse_split", "resolve_arm", "uses_stages"]

RERANK_SUFFIX = "+rerank"
#: hash buckets of the split; weights are spread over these
SPLIT_BUCKETS = 10_000


def base_arm(arm: str) -> str:
    """'lexical+rerank' -> 'lexical'."""
    return arm.removesuffix(RERANK_SUFFIX)


def uses_stages(arm: str) -> bool:
    return arm.endswith(RERANK_SUFFIX)


def resolve_arm(arm: str, rerank: bool = False) -> str:
    """The arm a request runs: `rerank: true` turns `ann` into `ann+rerank` (and `lexical` alike)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; valid arms: {', '.join(ARMS)}")
    return arm + RERANK_SUFFIX if rerank and not uses_stages(arm) else arm


# -- the online split --------------------------------------------------------------------------
@dataclass(frozen=True)
class ArmSplit:
    """Arms with integer weights, e.g. (("ann", 90), ("lexical", 10))."""

    weights: tuple[tuple[str, int], ...]

    @property
    def arms(self) -> list[str]:
        return [arm for arm, _ in self.weights]

    def __str__(self) -> str:
        return ",".join(f"{arm}:{w}" for arm, w in self.weights)

    def assign(self, key: str) -> str:
        """The arm of `key` (a session id): stable across processes (sha256, not Python's hash)."""
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        bucket = int.from_bytes(digest[:8], "big") % SPLIT_BUCKETS
        total = sum(w for _, w in self.weights)
        point = bucket * total / SPLIT_BUCKETS  # in [0, total)
        upto = 0
        for arm, weight in self.weights:
            upto += weight
            if point < upto:
                return arm
        return self.weights[-1][0]


def parse_split(text: str) -> ArmSplit:
    """'ann:90,lexical:10' -> ArmSplit; raises ValueError naming the bad part."""
    return ArmSplit(split_weights(text))


def arm_split(settings: Settings) -> ArmSplit | None:
    """The configured online split (FAQ_AB_SPLIT), None when every request takes its own or the default arm."""
    return parse_split(settings.ab_split) if settings.ab_split else None
