"""The console's session cap on each backend: a sign-in ends only sessions of its own KB (or of
FAQ_ADMIN_TOKEN's), and the table as a whole stays bounded, taking from the KB that holds the most."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from app.api.console import sessions as sessions_module
from app.api.console.sessions import Sessions


def clocked(store) -> Sessions:
    """Sessions on the store whose clock moves a second per call, so "least recently used" is exact."""
    now = [datetime(2026, 1, 1, tzinfo=timezone.utc)]

    def tick() -> datetime:
        now[0] += timedelta(seconds=1)
        return now[0]

    return Sessions(store.console_sessions, clock=tick)


def bucket_sizes(store) -> dict:
    with store.engine.connect() as conn:
        return dict(conn.exec_driver_sql("SELECT kb, count(*) FROM console_sessions GROUP BY kb").all())


def test_one_kbs_sign_ins_end_only_its_own_sessions(any_store, monkeypatch):
    monkeypatch.setattr(sessions_module, "MAX_SESSIONS", 20)
    store = any_store
    store.catalog.create("kb-a")
    store.catalog.create("kb-b")
    a_token = store.catalog.issue_token("kb-a", "admin")[0]
    b_token = store.catalog.issue_token("kb-b", "admin")[0]
    sessions = clocked(store)
    admin = sessions.open(None, admin_token="the-admin-token")
    kept = [sessions.open("kb-b", b_token) for _ in range(5)]
    opened_a = [sessions.open("kb-a", a_token) for _ in range(100)]
    assert all(sessions.get(s.id) is not None for s in [admin, *kept])
    assert bucket_sizes(store) == {None: 1, "kb-b": 5, "kb-a": 20}
    # the ones kept are KB A's most recent
    assert [sessions.get(s.id) is not None for s in opened_a] == [False] * 80 + [True] * 20
    # FAQ_ADMIN_TOKEN's sessions are a bucket of their own, with their own cap
    admins = [sessions.open(None, admin_token="the-admin-token") for _ in range(30)]
    assert bucket_sizes(store) == {None: 20, "kb-b": 5, "kb-a": 20}
    assert sessions.get(admins[-1].id) is not None and sessions.get(admin.id) is None
    assert all(sessions.get(s.id) is not None for s in kept)


def test_the_table_stays_bounded_taking_from_the_largest_kb(any_store, monkeypatch):
    monkeypatch.setattr(sessions_module, "MAX_SESSIONS", 20)
    monkeypatch.setattr(sessions_module, "MAX_SESSIONS_TOTAL", 30)
    store = any_store
    tokens = {}
    for kb in ("kb-a", "kb-b", "kb-c"):
        store.catalog.create(kb)
        tokens[kb] = store.catalog.issue_token(kb, "admin")[0]
    sessions = clocked(store)
    small = [sessions.open("kb-c", tokens["kb-c"]) for _ in range(3)]
    for _ in range(20):
        sessions.open("kb-a", tokens["kb-a"])
    assert bucket_sizes(store) == {"kb-c": 3, "kb-a": 20}
    # the table is full: KB B's sign-ins take from KB A, the largest, until they are level (the new
    # session comes on top of the trimmed table)
    for _ in range(20):
        sessions.open("kb-b", tokens["kb-b"])
    assert bucket_sizes(store) == {"kb-c": 3, "kb-a": 13, "kb-b": 14}
    # level with the largest, a KB's sign-ins end its own sessions
    for _ in range(10):
        sessions.open("kb-a", tokens["kb-a"])
    assert bucket_sizes(store) == {"kb-c": 3, "kb-a": 14, "kb-b": 13}
    assert all(sessions.get(s.id) is not None for s in small), "the smallest KB lost nothing"


def test_expire_trims_a_table_far_over_the_total(any_store):
    """A table already over the bound (a lowered cap, a restored backup) comes down in one call, the
    largest KBs first and level with each other."""
    store = any_store
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    counts = {"kb-a": 40, "kb-b": 25, "kb-c": 5}
    for kb, n in counts.items():
        store.catalog.create(kb)
        token_id = store.catalog.issue_token(kb, "admin")[0]
        for i in range(n):
            store.console_sessions.create(f"{kb}-{i}", kb=kb, token_id=token_id, admin_sha256=None, csrf="c",
                                          now=now + timedelta(seconds=i))
    long_ago = now - timedelta(days=1)
    ended = store.console_sessions.expire(long_ago, long_ago, "kb-c", keep=100, keep_total=35)
    assert ended == 35
    assert bucket_sizes(store) == {"kb-a": 15, "kb-b": 15, "kb-c": 5}
    assert store.console_sessions.get("kb-a-39") is not None and store.console_sessions.get("kb-a-24") is None
