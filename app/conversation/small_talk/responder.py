"""Small talk on the request path: which of a batch of messages are small talk, and the KB's answer to each.

The detector (models/small_talk) is picked by the encoder the KB serves with, so it reads the query vectors
the match already computed and adds no encoder call; an encoder without a shipped detector gets the one
that reads the text alone. A message is small talk when the detector gives small talk at large at least
`threshold` and names a kind; anything else is matched as usual.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from app.conversation.small_talk.answers import answer
from models.small_talk.detector import SmallTalkDetector, for_encoder

#: the detector's P(small talk) from which a message is answered as small talk (docs/results.md: chosen on
#: the training sets' requests wrapped in small talk, not on the test sets)
THRESHOLD = 0.5


@dataclass(frozen=True)
class SmallTalkReply:
    kind: str
    answer: str
    probability: float

    def as_dict(self) -> dict:
        return {"kind": self.kind, "answer": self.answer}


class SmallTalk:
    """One KB's small talk: its persona and its own answers over the shipped ones."""

    def __init__(self, encoder_id: str | None, dim: int | None, persona: str = "professional",
                 overrides: dict[str, list[str]] | None = None, threshold: float = THRESHOLD,
                 detector: SmallTalkDetector | None = None) -> None:
        detector = detector or for_encoder(encoder_id)
        if detector.dim and detector.dim != dim:
            detector = for_encoder(None)  # another encoder of the same name would give other vectors
        self.detector = detector
        self.persona = persona
        self.overrides = {k: list(v) for k, v in (overrides or {}).items() if v}
        self.threshold = threshold
        answer("greeting", persona, self.overrides)  # an unknown persona or kind fails here, not on a request

    def key(self) -> tuple:
        """What changes a reply (the pipeline's query cache key)."""
        return (self.detector.encoder, self.persona, tuple(sorted((k, tuple(v)) for k, v in self.overrides.items())),
                self.threshold)

    def replies(self, texts: Sequence[str], vectors: np.ndarray | None) -> list[SmallTalkReply | None]:
        if not texts:
            return []
        verdicts = self.detector.detect(texts, vectors if self.detector.dim else None)
        out: list[SmallTalkReply | None] = []
        for text, verdict in zip(texts, verdicts):
            if verdict.kind is None or verdict.small_talk < self.threshold:
                out.append(None)
                continue
            # the same message gets the same variant (answers are cached), another one likely another
            pick = zlib.crc32(" ".join(text.lower().split()).encode("utf-8"))
            out.append(SmallTalkReply(verdict.kind, answer(verdict.kind, self.persona, self.overrides, pick),
                                      verdict.small_talk))
        return out
