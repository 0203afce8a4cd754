"""The small-talk detector: its tokens, slips of known words, the shipped folders (one per encoder plus the
text-only one) and a folder written and read back."""
from __future__ import annotations

import numpy as np
import pytest

from models.small_talk.detector import SHIPPED, TEXT_ONLY, SmallTalkDetector, Vocabulary, for_encoder, tokens


def test_tokens_fold_case_apostrophes_repeats_and_keep_emoji():
    assert tokens("Thanksss!!! What's UP 👍") == ["thankss", "whats", "up", "👍"]


def test_a_slip_of_a_small_talk_word_is_known_and_a_request_word_is_not():
    vocab = Vocabulary.of(["thanks", "hello", "bye"])
    assert vocab.knows("thnks") and vocab.knows("helo") and vocab.knows("thansk") and vocab.knows("🙂")
    assert not vocab.knows("refund") and not vocab.knows("order") and not vocab.knows("by")


@pytest.mark.parametrize("folder", sorted(p.name for p in SHIPPED.iterdir() if p.is_dir()))
def test_every_shipped_detector_loads_and_names_its_encoder(folder):
    detector = SmallTalkDetector.load(SHIPPED / folder)
    assert detector.classes[-1] == "none" and len(detector.classes) == 10
    assert (detector.encoder is None) == (folder == TEXT_ONLY)
    if detector.encoder is not None:
        assert detector.encoder == folder and detector.dim in (384, 768)


def test_the_text_only_detector_tells_small_talk_from_requests():
    detector = for_encoder("some-encoder-without-a-detector")
    assert detector.encoder is None
    verdicts = detector.detect(["hi!", "thank you so much", "bye", "hi, my order is late", "where is my refund"])
    assert [v.kind for v in verdicts] == ["greeting", "thanks", "goodbye", None, None]
    assert verdicts[0].small_talk > 0.5 > verdicts[3].small_talk


def test_a_detector_reading_vectors_needs_them(tmp_path):
    detector = for_encoder("all-MiniLM-L6-v2")
    with pytest.raises(ValueError, match="needs the all-MiniLM-L6-v2 vectors"):
        detector.detect(["hi"])
    assert len(detector.detect(["hi"], np.zeros((1, 384), np.float32))) == 1


def test_a_folder_round_trips(tmp_path):
    vocab = Vocabulary.of(["hi"])
    weights = np.arange(2 * 10 + 3 * 10, dtype=np.float32).reshape(5, 10) / 100
    classes = ["greeting", "thanks", "goodbye", "bot_identity", "how_are_you", "praise", "complaint",
               "acknowledgement", "help", "none"]
    detector = SmallTalkDetector(classes, ["w:hi", "bias"], weights, vocab, encoder="enc", embedding_scale=2.0)
    detector.save(tmp_path / "d")
    back = SmallTalkDetector.load(tmp_path / "d")
    vecs = np.ones((1, 3), np.float32)
    assert back.encoder == "enc" and back.dim == 3 and back.embedding_scale == 2.0
    np.testing.assert_allclose(back.probabilities(["hi"], vecs), detector.probabilities(["hi"], vecs), atol=1e-3)
