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


def test_dev_queries_rank_faqs_as_the_service_first_scores_them(tmp_path):
    """A FAQ's score is its best phrasing's cosine mixed with its answer's (the answer weight)."""
    from training.query_encoder.dev import DevSet, pair_dev_files

    dev = DevSet(name="t", queries=["q1", "q2"], labels=np.array([0, 1]), faq_ids=["a", "b"],
                 phrasing_texts=["pa1", "pa2", "pb"], phrasing_faq=np.array([0, 0, 1]),
                 answer_texts=["answer a", None])
    dev.phrasings = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    dev.answers = np.array([[0, 1, 0], [0, 0, 0]], dtype=np.float32)
    q = np.array([[0.6, 0.8, 0.0], [0.8, 0.0, 0.6]], dtype=np.float32)
    scores = dev.scores(q, answer_weight=0.5)
    # a: half its best phrasing's cosine, half its answer's; b has no answer and keeps its phrasing's
    assert np.allclose(scores, [[0.8, 0.0], [0.4, 0.6]])
    assert dev.top1(q, answer_weight=0.5) == 1.0 and dev.top1(q, answer_weight=0.9) == 1.0
    dev.labels = np.array([1, 1])
    assert dev.top1(q, answer_weight=0.5) == 0.5
    assert pair_dev_files([DEMO], [tmp_path / "dev.jsonl"])[0][0].name == "faq.jsonl"
    import pytest

    with pytest.raises(ValueError, match="same folder"):
        pair_dev_files([DEMO, "evaluation/data/energy/faq.jsonl"], [tmp_path / "dev.jsonl"])


def test_refinement_on_a_kb_is_kept_only_where_dev_queries_say_so(tmp_path, capsys, query_encoder_work):
    """`--from DIR --kb F --dev Q`: the folder is the start or a refined epoch, whichever ranks the dev
    queries best; without --dev a refinement is refused (nothing judges it on users' wording)."""
    from safetensors.numpy import load_file

    start, out = tmp_path / "start", tmp_path / "refined"
    assert faq(["train", "query-encoder", "--out", str(start), "--kb", DEMO, "--work", str(query_encoder_work),
                "--teacher", "msem", "--runtime", "torch"]) == 0
    dev = tmp_path / "dev.jsonl"
    lines = [line for line in open(QUERIES, encoding="utf-8") if '"faq_id": null' not in line][:24]
    dev.write_text("".join(lines), encoding="utf-8")
    base = ["train", "query-encoder", "--from", str(start), "--kb", DEMO, "--out", str(out),
            "--work", str(query_encoder_work), "--teacher", "msem", "--runtime", "torch", "--train-layers", "1"]
    capsys.readouterr()
    assert faq(base) == 2
    assert "--dev" in capsys.readouterr().err and not out.exists()
    assert faq(base + ["--dev", str(dev), "--epochs", "2", "--device", "cpu"]) == 0
    said = capsys.readouterr().err
    report = json.loads((out / "refine.json").read_text())["fine_tune"]
    assert report["metric"] == "dev_top1" and "at the start" in said
    assert report["best_metric"] >= report["dev_top1_start"]
    config = json.loads((out / "config.json").read_text())
    assert config["fit"]["from"] == str(start) and config["train_layers"] == 1
    if report["kept"] == "start":  # nothing better: the start's projection, unchanged
        assert np.allclose(load_file(str(out / "projection.safetensors"))["weight"],
                           load_file(str(start / "projection.safetensors"))["weight"])
    # a resumed run keeps measuring against the same start
    assert faq(base + ["--dev", str(dev), "--epochs", "3", "--device", "cpu", "--resume"]) == 0
    resumed = json.loads((out / "refine.json").read_text())["fine_tune"]
    assert resumed["epochs_done"] == 3 and resumed["dev_top1_start"] == report["dev_top1_start"]
    assert f"{report['dev_top1_start']:.3f} at the start" in capsys.readouterr().err
    vecs = load_encoder(str(out), runtime="torch", device="cpu", cache_dir=tmp_path / "cache").encode(["hi there"])
    assert vecs.shape == (1, json.loads((start / "config.json").read_text())["dim"])


def test_teacher_pack_round_trip_is_near_lossless_and_refuses_damage(tmp_path):
    import pytest

    from training.loop import TrainError
    from training.query_encoder.pack import pack_lookup, read_pack, write_pack

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((50, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = [f"question number {i}" for i in range(50)]
    path = tmp_path / "t.pack"
    meta = write_pack(path, texts, vectors, teacher_id="t", runtime="torch", n_corpus=40)
    got, back, read_meta = read_pack(path)
    assert got == texts and read_meta == meta and meta["n_corpus"] == 40
    assert np.min(np.sum(back * vectors, axis=1)) > 0.9999
    assert np.allclose(pack_lookup(path, got, back)(["question number 3"]), back[3:4])
    with pytest.raises(TrainError, match="lacks 1 text"):
        pack_lookup(path, got, back)(["not in it"])
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(TrainError, match="not a teacher pack"):
        read_pack(path)


def test_a_pack_trains_the_student_without_the_teacher(tmp_path, capsys, query_encoder_work, monkeypatch):
    """The pack written beside a fit carries the dev KB's texts too, so a fine-tuning from it (with user-like
    slips) runs where the teacher cannot be loaded, and the folder still names the teacher it was fitted to."""
    pack = tmp_path / "teacher.pack"
    assert faq(["train", "query-encoder", "--out", str(tmp_path / "ridge"), "--kb", DEMO, "--work",
                str(query_encoder_work), "--teacher", "msem", "--runtime", "torch", "--dev", QUERIES,
                "--write-teacher-pack", str(pack)]) == 0
    teacher_id = json.loads((tmp_path / "ridge" / "config.json").read_text())["teacher"]
    import models.encoders.load as load

    real = load.load_encoder
    monkeypatch.setattr(load, "load_encoder",
                        lambda spec, **kw: (_ for _ in ()).throw(AssertionError("teacher loaded"))
                        if spec == "msem" else real(spec, **kw))
    out = tmp_path / "student"
    assert faq(["train", "query-encoder", "--out", str(out), "--teacher-pack", str(pack), "--kb", DEMO, "--dev",
                QUERIES, "--work", str(tmp_path / "w"), "--runtime", "torch", "--train-layers", "1", "--epochs", "1",
                "--typos", "0.5", "--device", "cpu"]) == 0
    assert "dev top-1:" in capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["teacher"] == teacher_id and config["train_layers"] == 1


def test_slips_change_one_word_of_a_query_at_most():
    from training.query_encoder.slips import slip

    rng = np.random.default_rng(0)
    text = "How long does delivery take to Scotland?"
    for _ in range(200):
        out = slip(text, rng)
        changed = [a for a, b in zip(text.rstrip("?").split(), out.rstrip("?").split()) if a != b]
        assert len(changed) <= 1 and abs(len(out) - len(text)) <= 1
    assert slip("ok", rng) == "ok"
