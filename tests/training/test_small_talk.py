"""`faq train smalltalk`'s fit: small talk of a few kinds against requests, with and without an encoder's
vectors; requests wrapped in small talk stay requests; bad input is a TrainError."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from app.conversation.small_talk.answers import KINDS
from training.loop import TrainError
from training.small_talk import SmallTalkConfig, collect, fit, wrap

TALK = [("hi", "greeting"), ("hello there", "greeting"), ("hey", "greeting"), ("thanks", "thanks"),
        ("thank you", "thanks"), ("cheers", "thanks"), ("bye", "goodbye"), ("see you", "goodbye")]
REQUESTS = ["where is my order", "how do i get a refund", "change my email address", "reset my password",
            "when does the shop open", "is there parking", "cancel my order please", "my parcel is late"]


def test_fit_tells_kinds_and_requests_apart(tmp_path):
    requests = REQUESTS + wrap(REQUESTS, TALK, 20, random.Random(1))
    detector = fit(TALK, requests, KINDS, SmallTalkConfig(steps=150, min_count=1))
    verdicts = detector.detect(["hi", "thanks", "bye", "hi where is my order"])
    assert [v.kind for v in verdicts] == ["greeting", "thanks", "goodbye", None]
    detector.save(tmp_path / "d")
    assert json.loads((tmp_path / "d" / "config.json").read_text())["trained_on"]["small_talk"] == len(TALK)


def test_fit_with_vectors_records_the_encoder():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(TALK) + len(REQUESTS), 4)).astype(np.float32)
    detector = fit(TALK, REQUESTS, KINDS, SmallTalkConfig(steps=20, min_count=1), vectors, "enc-4")
    assert detector.encoder == "enc-4" and detector.dim == 4
    with pytest.raises(TrainError, match="one vector per text"):
        fit(TALK, REQUESTS, KINDS, SmallTalkConfig(steps=5), vectors[:3], "enc-4")


def test_bad_training_input_is_refused():
    with pytest.raises(TrainError, match="unknown kinds"):
        fit([("hi", "salute")], REQUESTS, KINDS, SmallTalkConfig(steps=5))
    with pytest.raises(TrainError, match="both"):
        fit(TALK, [], KINDS, SmallTalkConfig(steps=5))


def test_collect_reads_kb_files_and_wraps_requests(tmp_path):
    talk = tmp_path / "talk.jsonl"
    talk.write_text("".join(json.dumps({"text": t, "kind": k}) + "\n" for t, k in TALK))
    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps({"faq_id": f"f{i}", "question": q, "answer": "a"}) + "\n"
                          for i, q in enumerate(REQUESTS)))
    data = collect(talk, [kb], cfg=SmallTalkConfig(wrapped=10, fragments=30))
    assert len(data.talk) == len(TALK) and len(data.requests) == len(REQUESTS) + 10 + 30
    assert all(any(r in w for r in REQUESTS) for w in data.requests[len(REQUESTS):len(REQUESTS) + 10])
    talk_words = {w for t, _ in TALK for w in t.split()}
    words = [w for f in data.requests[-30:] for w in f.split() if w.isalpha()]
    assert words and not talk_words & set(words)
