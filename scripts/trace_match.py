"""Which product files one `/match` passes through: a small KB built and served in process (MiniLM, Annoy),
warmed up, then one uncached `/match` traced with a profiler on every thread.

    .venv/bin/python scripts/trace_match.py [--json OUT]

Prints two lists, in the order the request first reaches each file:
- the way: the files on the call stack from the route to each match step (and to the batcher's hand-off
  to its worker thread): the files a reader follows to see where a request goes;
- every product file (app/, index/, models/, kb/) whose code ran, the HTTP edge (middleware, auth, body
  checks, metrics) and what the way consults (data types, the decider, the turn plan) included.
docs/architecture.md lists the way.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("app/", "index/", "models/", "kb/")
#: where a request hands on to work that is not on its caller's stack: the steps, and the batcher's queue
MARKERS = {("app/match/candidates.py", "run"), ("app/match/rerank.py", "run"), ("app/match/respond.py", "run"),
           ("app/api/workers.py", "submit")}
FAQS = {
    "reset_password": ("Use the 'Forgot password' link.", ["How do I reset my password?", "I forgot my password"]),
    "shipping_time": ("3 to 5 business days.", ["How long does shipping take?", "When will my package arrive?"]),
    "refund": ("Refunds take 10 days.", ["How do I get a refund?", "I want my money back"]),
}


class Tracer:
    def __init__(self) -> None:
        self.on = False
        self.ran: list[str] = []
        self.way: list[str] = []
        self.lock = threading.Lock()

    @staticmethod
    def product(frame) -> str | None:
        name = frame.f_code.co_filename
        if not name.startswith(str(ROOT) + "/"):
            return None
        rel = name[len(str(ROOT)) + 1:]
        return rel if rel.startswith(PRODUCT) else None

    def __call__(self, frame, event, arg):
        if not self.on or event != "call":
            return
        rel = self.product(frame)
        if rel is None:
            return
        with self.lock:
            if rel not in self.ran:
                self.ran.append(rel)
            if (rel, frame.f_code.co_name) in MARKERS:
                stack, f = [], frame
                while f is not None:
                    part = self.product(f)
                    if part is not None and part.startswith("app/") and "/middleware/" not in part \
                            and part not in stack:
                        stack.append(part)
                    f = f.f_back
                for part in reversed(stack):
                    if part not in self.way:
                        self.way.append(part)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write both lists here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    from fastapi.testclient import TestClient

    from app.api.main import create_app
    from app.release import build_current
    from app.settings import Settings
    from app.store import KbRecord
    from index.artifacts import BuildRegistry
    from migrations.runner import migrated_store
    from models.encoders.pretrained import MiniLMEncoder

    torch.set_num_threads(1)
    tracer = Tracer()
    threading.setprofile(tracer)
    sys.setprofile(tracer)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), encoder="minilm", torch_threads=1, encode_workers=1,
                            kb_poll_seconds=0, query_log=False)
        store = migrated_store(settings)
        store.import_records([KbRecord(f, q, a if i == 0 else None) for f, (a, qs) in FAQS.items()
                              for i, q in enumerate(qs)])
        encoder = MiniLMEncoder(device="cpu")
        build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5)
        with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
            for text in ("how do I reset my password", "refund please", "hello"):
                client.post("/match", json={"query": text})
            tracer.on = True
            response = client.post("/match", json={"query": "when will my parcel arrive"})
            tracer.on = False
    sys.setprofile(None)
    threading.setprofile(None)
    if response.status_code != 200:
        print(f"/match answered {response.status_code}: {response.text}", file=sys.stderr)
        return 1
    report = {"way": tracer.way, "ran": tracer.ran,
              "ran_app": [f for f in tracer.ran if f.startswith("app/")]}
    print(f"the way ({len(tracer.way)} files):")
    for i, part in enumerate(tracer.way, 1):
        print(f"  {i:2d}. {part}")
    print(f"every product file that ran: {len(tracer.ran)} ({len(report['ran_app'])} in app/)")
    for part in tracer.ran:
        print(f"      {part}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
