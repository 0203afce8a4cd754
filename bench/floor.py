"""The HTTP floor: what a FastAPI route that returns a constant costs per request, served the way
`faq serve` serves faq-match, so that compare.py can say how much of faq-match's latency outside its
pipeline is HTTP and framework, and how much is faq-match's own.

    python bench/floor.py serve --port 8200
    python bench/load.py --url http://127.0.0.1:8200 --queries app/demo/queries.jsonl --concurrency 1

`POST /match` takes faq-match's /match body (parsed by a small pydantic model, so request validation is
part of the floor) and answers a constant body shaped and sized like a typical faq-match /match answer
(five matches, `timings_ms` all zero). The body is encoded once at import: building and serialising a
response is faq-match's own work and belongs to its side of the difference. `GET /readyz` answers 200.

uvicorn gets the same options as `faq serve` (cli/serve.py `uvicorn_options`: the HTTP protocol class
with its header deadline, the connection limit, the graceful shutdown), one worker, uvicorn's default
event loop; the app is a plain FastAPI app with no middleware.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

INDEX_VERSION = "floor"


def _match(i: int) -> dict:
    # phrasing and answer lengths of the demo KB's typical FAQ (app/demo/faq.jsonl)
    return {"faq_id": f"floor-faq-{i}", "question": f"how do I reach the constant floor FAQ number {i}?",
            "answer": ("A constant answer of about the length of a typical FAQ answer: a few sentences that tell the "
                       "user what to do, where to click and what happens next, and what to try when it does "
                       f"not work out ({i})."),
            "score": round(0.9 / (i + 1), 6)}


def response_body() -> dict:
    matches = [_match(i) for i in range(5)]
    return {
        "request_id": "0" * 32,
        "query": "how do I reach the floor",
        "arm": "ann",
        "index_version": INDEX_VERSION,
        "answer": {k: matches[0][k] for k in ("faq_id", "answer", "score")},
        "matches": matches,
        "decision": "answer",
        "options": [],
        "threshold": 0.5,
        "expected_precision": 0.84,
        "timings_ms": {"encode": 0.0, "retrieve": 0.0, "rerank": 0.0, "decide": 0.0, "total": 0.0},
        "cached": False,
    }


BODY = json.dumps(response_body(), separators=(",", ":")).encode()


class MatchRequest(BaseModel):
    """faq-match's /match fields and limits (app/api/schemas.py), without its custom validators."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(min_length=1, max_length=1000)
    top_k: int | None = Field(default=None, ge=1, le=50)
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    rerank: bool = False
    arm: str | None = None
    session_id: str | None = Field(default=None, max_length=128)


def create_app():
    from fastapi import FastAPI
    from fastapi.responses import Response

    app = FastAPI(title="HTTP floor: a constant /match")

    @app.get("/readyz")
    async def readyz() -> dict:
        return {"ready": True, "index_version": INDEX_VERSION, "body_bytes": len(BODY)}

    # async, as faq-match's route: no hop to the thread pool
    @app.post("/match")
    async def match(body: MatchRequest) -> Response:
        return Response(BODY, media_type="application/json")

    return app


def __getattr__(name: str):
    """`app` for uvicorn's import string, created on first access so importing this module is cheap."""
    if name == "app":
        application = create_app()
        globals()["app"] = application
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the constant /match")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8200)
    s.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    args = p.parse_args(argv)

    import uvicorn

    from app.settings import get_settings
    from cli.serve import uvicorn_options

    print(f"floor: a constant /match ({len(BODY)} bytes) on http://{args.host}:{args.port}", file=sys.stderr,
          flush=True)
    uvicorn.run("bench.floor:app", host=args.host, port=args.port, workers=1, log_level=args.log_level,
                **uvicorn_options(get_settings()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
