"""A query encoder fitted into another encoder's space (training/query_encoder.py, models/encoders/query.py):
the closed-form fit, the resumable vector cache, and the folder used as the query side of `faq eval match`
over an index built by its teacher (here the shipped MSEM model, cheap on a CPU; mpnet in production)."""
from __future__ import annotations

import json

import numpy as np

from cli.main import main as faq
from models.encoders.load import load_encoder
from training.query_encoder import cached_vectors, corpus_sentences, fit_projection

DEMO = "app/demo/faq.jsonl"
QUERIES = "app/demo/queries.jsonl"


class Counting:
    """A real encoder that also counts the texts it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.dim, self.id, self.seen = inner, inner.dim, inner.id, 0

    def encode(self, texts, batch_size=64, show_progress_bar=False):
        self.seen += len(texts)
        return self.inner.encode(texts, batch_size=batch_size)


def test_fit_recovers_a_linear_map():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 16)).astype(np.float32)
    w, b = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    weight, bias = fit_projection(x, x @ w + b, ridge=1e-6)
    assert np.allclose(weight, w, atol=1e-3) and np.allclose(bias, b, atol=1e-3)


def test_vectors_are_cached_in_chunks_and_resumed(tmp_path, minilm_encoder):
    texts = [f"how do I change setting number {i}" for i in range(10)]
    counting = Counting(minilm_encoder)
    first = cached_vectors(counting, texts, tmp_path / "v", chunk=4, progress=lambda _: None)
    assert first.shape == (10, 384) and counting.seen == 10 and len(list((tmp_path / "v").glob("*.npy"))) == 3
    again = cached_vectors(counting, texts, tmp_path / "v", chunk=4, progress=lambda _: None)
    assert counting.seen == 10 and np.array_equal(first, again)  # nothing encoded twice
    more = cached_vectors(counting, texts + ["and one more"], tmp_path / "v", chunk=4, progress=lambda _: None)
    assert counting.seen == 13 and np.array_equal(more[:8], first[:8])  # only the changed last chunk


def test_corpus_reads_kb_phrasings_and_answers_and_skips_missing_datasets(tmp_path):
    texts, counts = corpus_sentences(tmp_path, [DEMO])
    assert counts["clinc150"] == 0 and counts["kb:demo/faq.jsonl"] == len(texts) > 100


def test_trained_folder_is_the_query_side_of_its_teachers_index(tmp_path, capsys):
    out, work = tmp_path / "qe", tmp_path / "work"
    assert faq(["train", "query-encoder", "--out", str(out), "--kb", DEMO, "--work", str(work),
                "--teacher", "msem", "--base", "minilm", "--runtime", "torch"]) == 0
    assert "held out, mean cosine to the teacher" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    teacher = load_encoder("msem", runtime="torch", device="cpu")
    assert config["architecture"] == "query-encoder" and config["teacher"] == teacher.id
    query = load_encoder(str(out), runtime="torch", device="cpu")
    vecs = query.encode(["how do i reset my password"])
    assert vecs.shape == (1, teacher.dim) and np.isclose(np.linalg.norm(vecs), 1.0, atol=1e-5)
    # the same text lands near where the teacher puts it
    assert float(vecs[0] @ teacher.encode(["how do i reset my password"])[0]) > 0.7

    report = tmp_path / "eval.json"
    assert faq(["eval", "match", "--kb", DEMO, "--queries", QUERIES, "--model", "msem", "--query-encoder", str(out),
                "--json", str(report)]) == 0
    got = json.loads(report.read_text())
    assert got["query_encoder"]["build_encoder_id"] == teacher.id and got["metrics"]["top1_accuracy"] > 0.5

    code = faq(["eval", "match", "--kb", DEMO, "--queries", QUERIES, "--model", "minilm",
                "--query-encoder", str(out), "--json", str(tmp_path / "refused.json")])
    assert code == 2 and "was fitted to" in capsys.readouterr().err
