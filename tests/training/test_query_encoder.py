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


def test_trained_folder_is_the_query_side_of_its_teachers_index(tmp_path, capsys, query_encoder_work):
    out, work = tmp_path / "qe", query_encoder_work
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



def test_fine_tuned_layers_serve_the_vectors_training_saw(tmp_path, query_encoder_work):
    """With --train-layers the folder's top layers run inside the packaged base (materialised in the model
    cache): a query's served vector is the one the trainer computed for it."""
    from training.query_encoder import QueryEncoderConfig, train_query_encoder
    from training.query_encoder.student import StudentTrainer

    out, cache = tmp_path / "qe", tmp_path / "cache"
    cfg = QueryEncoderConfig(teacher="msem", base="minilm", train_layers=1, epochs=1, batch_size=64)
    report = train_query_encoder(out, data_dir=None, kb_files=[DEMO], work=query_encoder_work, config=cfg,
                                 runtime="torch", device="cpu", cache_dir=cache)
    assert report["fine_tune"]["epochs_done"] == 1 and (out / "top_layers.safetensors").exists()
    served = load_encoder(str(out), runtime="torch", device="cpu", cache_dir=cache)
    texts = ["how do i reset my password", "can I pay with a card abroad?"]
    import torch

    trainer = StudentTrainer.__new__(StudentTrainer)  # the trainer's forward on the saved weights
    from models.encoders.msem.layers import MiniLMLayer
    from models.encoders.words import MiniLMText
    from safetensors.numpy import load_file

    trainer.cfg, trainer.device = cfg, torch.device("cpu")
    trainer.text = MiniLMText(base="minilm")
    trainer.first = 5
    layer = MiniLMLayer()
    state = {k.split(".", 3)[3]: torch.from_numpy(v.astype(np.float32))
             for k, v in load_file(str(out / "top_layers.safetensors")).items()}
    layer.load_hf_state(state)
    trainer.top = torch.nn.ModuleList([layer]).eval()
    trainer.text.stop_after(5)
    proj = load_file(str(out / "projection.safetensors"))
    trainer.projection = torch.nn.Linear(384, proj["weight"].shape[1])
    with torch.no_grad():
        trainer.projection.weight.copy_(torch.from_numpy(proj["weight"].T))
        trainer.projection.bias.copy_(torch.from_numpy(proj["bias"]))
        expected = trainer.forward(texts).numpy()
    assert np.allclose(served.encode(texts), expected, atol=2e-3)
