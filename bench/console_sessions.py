"""The console's session cap under a flood of sign-ins with one KB's token: KB B's sessions and
FAQ_ADMIN_TOKEN's are opened first, then N sign-ins with KB A's admin token go through `Sessions.open`
(what the sign-in form calls, with the real caps: 10,000 per KB, 100,000 in all), then every KB B and
admin session is checked to be still valid. Times each sign-in (its expiry and insert) and reports how
many of each KB's sessions are left. A fresh database per run: SQLite in a temporary folder, and a
scratch database on PostgreSQL with --postgres.

    python bench/console_sessions.py [--sign-ins 10000,20000] [--postgres postgresql://postgres@127.0.0.1:5432/test]

Writes bench/results/console_sessions.json and .md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.machine import cpu_info  # noqa: E402


@contextlib.contextmanager
def scratch_database(backend: str, postgres: str | None) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="console-sessions-") as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    import psycopg2
    from sqlalchemy.engine import make_url

    admin = psycopg2.connect(make_url(postgres).set(drivername="postgresql").render_as_string(hide_password=False))
    admin.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    name = f"faq_bench_sessions_{uuid.uuid4().hex[:12]}"
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield make_url(postgres).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def measure(backend: str, url: str, sign_ins: int, kept_b: int, kept_admin: int) -> dict:
    from app.api.console import sessions as sessions_module
    from app.api.console.sessions import Sessions
    from app.store import FaqStore
    from migrations import runner

    runner.upgrade(url)
    with FaqStore(url) as store:
        for kb in ("kb-a", "kb-b"):
            store.catalog.create(kb)
        a_token = store.catalog.issue_token("kb-a", "admin")[0]
        b_token = store.catalog.issue_token("kb-b", "admin")[0]
        sessions = Sessions(store.console_sessions)
        others = [sessions.open("kb-b", b_token) for _ in range(kept_b)]
        others += [sessions.open(None, admin_token="the-admin-token") for _ in range(kept_admin)]
        times = []
        start = time.perf_counter()
        for _ in range(sign_ins):
            t0 = time.perf_counter()
            sessions.open("kb-a", a_token)
            times.append(time.perf_counter() - t0)
        total_s = time.perf_counter() - start
        valid = [sessions.get(s.id) is not None for s in others]
        with store.engine.connect() as conn:
            sizes = dict(conn.exec_driver_sql("SELECT kb, count(*) FROM console_sessions GROUP BY kb").all())
    times.sort()
    return {"backend": backend, "sign_ins_kb_a": sign_ins, "cap_per_kb": sessions_module.MAX_SESSIONS,
            "cap_total": sessions_module.MAX_SESSIONS_TOTAL,
            "kb_b_sessions": kept_b, "kb_b_still_valid": sum(valid[:kept_b]),
            "admin_sessions": kept_admin, "admin_still_valid": sum(valid[kept_b:]),
            "kb_a_sessions_left": int(sizes.get("kb-a", 0)), "table_rows": int(sum(sizes.values())),
            "total_s": round(total_s, 2), "sign_in_p50_ms": round(statistics.median(times) * 1000, 3),
            "sign_in_p99_ms": round(times[int(0.99 * (len(times) - 1))] * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sign-ins", default="10000,20000", help="KB A sign-ins per run, comma-separated")
    ap.add_argument("--kb-b", type=int, default=100, help="KB B sessions opened first")
    ap.add_argument("--admin", type=int, default=10, help="FAQ_ADMIN_TOKEN sessions opened first")
    ap.add_argument("--postgres", help="a PostgreSQL server URL: also run on a scratch database there")
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args(argv)
    results = []
    for backend in ["sqlite"] + (["postgresql"] if args.postgres else []):
        for n in (int(x) for x in args.sign_ins.split(",")):
            with scratch_database(backend, args.postgres) as url:
                results.append(measure(backend, url, n, args.kb_b, args.admin))
            print(json.dumps(results[-1]), flush=True)
    ok = all(r["kb_b_still_valid"] == r["kb_b_sessions"] and r["admin_still_valid"] == r["admin_sessions"]
             and r["kb_a_sessions_left"] <= r["cap_per_kb"] for r in results)
    out = {"date": date.today().isoformat(), "machine": cpu_info(), "all_other_sessions_kept": ok, "results": results}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "console_sessions.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    command = f"python bench/console_sessions.py --sign-ins {args.sign_ins}" + (" --postgres URL" if args.postgres else "")
    lines = [f"# Console sessions under one KB's flood of sign-ins ({out['date']})", "",
             f"`{command}`, `Sessions.open` on a fresh database, CPU {out['machine'].get('cpu_model')}. "
             f"Every KB B and admin session still valid afterwards: {'yes' if ok else 'NO'}.", "",
             "| backend | KB A sign-ins | KB A left (cap) | KB B valid | admin valid | rows | total s | "
             "sign-in p50 ms | p99 ms |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['backend']} | {r['sign_ins_kb_a']:,} | {r['kb_a_sessions_left']:,} ({r['cap_per_kb']:,}) | "
              f"{r['kb_b_still_valid']}/{r['kb_b_sessions']} | {r['admin_still_valid']}/{r['admin_sessions']} | "
              f"{r['table_rows']:,} | {r['total_s']:.1f} | {r['sign_in_p50_ms']:.2f} | {r['sign_in_p99_ms']:.2f} |"
              for r in results]
    (args.out_dir / "console_sessions.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
