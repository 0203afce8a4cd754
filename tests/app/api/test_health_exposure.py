"""What callers without a token learn from the health and metrics routes, and what they can make the
service do: /kbs/{kb}/readyz loads and unloads nothing for them, tells nothing about which KBs exist
when FAQ_MATCH_REQUIRES_KEY is on (nor does any other /kbs/{kb} route), and /metrics can need
FAQ_METRICS_TOKEN and leave KB names out (FAQ_METRICS_KB_LABELS=false)."""
from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from app.api.main import create_app
from app.api.routes.health import NOT_RESIDENT_REASON
from tests.helpers.api import bearer, build, make_settings, make_store, shop_records
from tests.helpers.server import LiveServer

ROOT = "root-token-0123456789abcdef0123456789"
METRICS = "metrics-token"
#: three KBs beside the default one; names of one length, so their answers can be compared byte for byte
KBS = ("kb-a", "kb-b", "kb-c")
UNKNOWN = "kb-z"


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):  # noqa: F811
    """(settings, store, tokens): the default KB and KBS, all built, with a read and an admin token each."""
    settings = make_settings(tmp_path_factory.mktemp("kbs"), admin_token=ROOT, max_resident_kbs=2)
    store = make_store(settings)
    build(store, encoder, settings)
    for name in KBS:
        store.catalog.create(name)
        store.for_kb(name).import_records(shop_records())
        build(store.for_kb(name), encoder, settings.for_kb(name))
    tokens = {(kb, kind): store.catalog.issue_token(kb, kind)[1] for kb in KBS for kind in ("read", "admin")}
    return settings, store, tokens


def app_for(built, encoder, **settings):  # noqa: F811
    base, store, _ = built
    return create_app(base.model_copy(update=settings), store=store, encoder=encoder)


def churn(app) -> tuple[int, int, list[str]]:
    """(loads, unloads, resident KBs in least-recently-used order)."""
    resident_kbs = app.state.resident_kbs
    return resident_kbs.loads, resident_kbs.unloads, [s.kb for s in resident_kbs.resident()]


def churn_counted(client) -> dict[str, float]:
    """What /metrics counts of KB loads and unloads."""
    return {line.split()[0]: float(line.split()[1]) for line in client.get("/metrics").text.splitlines()
            if line.startswith(("faq_kb_loads_total ", "faq_kb_unloads_total "))}


def test_anonymous_readyz_never_loads_or_evicts(built, encoder):  # noqa: F811
    app = app_for(built, encoder)
    with TestClient(app) as client:
        assert client.post("/kbs/kb-a/match", json={"query": "can my dog come"}).status_code == 200
        before, counted = churn(app), churn_counted(client)
        assert before == (1, 0, ["default", "kb-a"])
        assert counted == {"faq_kb_loads_total": 1.0, "faq_kb_unloads_total": 0.0}
        answers = [client.get(f"/kbs/{KBS[i % 3]}/readyz") for i in range(15)]
        assert churn(app) == before and churn_counted(client) == counted
        by_kb = {KBS[i % 3]: r for i, r in enumerate(answers)}
        assert by_kb["kb-a"].status_code == 200 and by_kb["kb-a"].json()["ready"] is True
        for kb in ("kb-b", "kb-c"):
            assert by_kb[kb].status_code == 503
            body = by_kb[kb].json()
            assert body["ready"] is False and body["reason"] == NOT_RESIDENT_REASON and body["index_version"] is None
        # an unknown KB: 404 from the catalogue, nothing loaded (a /match would tell as much with the setting off)
        unknown = client.get(f"/kbs/{UNKNOWN}/readyz")
        assert unknown.status_code == 404 and repr(UNKNOWN) in unknown.json()["error"]
        # the default KB is always resident: load balancers keep probing it without a token
        assert client.get("/readyz").status_code == 200 and client.get("/kbs/default/readyz").status_code == 200
        assert churn(app) == before
        # a /match does load, and the budget unloads the least recently used KB: both counted
        assert client.post("/kbs/kb-b/match", json={"query": "parking"}).status_code == 200
        assert churn(app) == (2, 1, ["default", "kb-b"])
        assert churn_counted(client) == {"faq_kb_loads_total": 2.0, "faq_kb_unloads_total": 1.0}


def test_anonymous_readyz_does_not_keep_a_kb_resident(built, encoder):  # noqa: F811
    """A probe does not count as use: the KB it names is still the first to go."""
    app = app_for(built, encoder, max_resident_kbs=3)
    with TestClient(app) as client:
        for kb in ("kb-a", "kb-b"):
            client.post(f"/kbs/{kb}/match", json={"query": "parking"})
        for _ in range(5):
            assert client.get("/kbs/kb-a/readyz").status_code == 200
        client.post("/kbs/kb-c/match", json={"query": "parking"})
        assert churn(app)[2] == ["default", "kb-b", "kb-c"]


def strip_kb(response: httpx.Response, kb: str) -> tuple[int, bytes, list[tuple[str, str]]]:
    """The answer with the KB's name blanked out (it echoes the path), without the Date header."""
    headers = sorted((k.lower(), v.replace(kb, "{kb}")) for k, v in response.headers.items() if k.lower() != "date")
    return response.status_code, response.content.replace(kb.encode(), b"{kb}"), headers


#: every /kbs/{kb} route an anonymous caller might try, with a valid body
ANONYMOUS_CALLS = [
    ("GET", "/readyz", None),
    ("POST", "/match", {"query": "can my dog come"}),
    ("POST", "/match/batch", {"queries": [{"query": "parking"}]}),
    ("POST", "/feedback", {"request_id": "r-1", "correct": True}),
    ("GET", "/admin/faqs", None),
    ("GET", "/admin/index", None),
    ("POST", "/admin/index/reload", None),
    ("GET", "/admin/review", None),
]


def test_with_match_requires_key_anonymous_answers_are_the_same_for_every_kb(built, encoder):  # noqa: F811
    """Resident, known but not resident, and unknown KBs get the same bytes, over real HTTP, and nothing loads."""
    _, _, tokens = built
    app = app_for(built, encoder, match_requires_key=True)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.post("/kbs/kb-a/match", json={"query": "parking"}, headers=bearer(tokens["kb-a", "read"])).status_code == 200
        before = churn(app)
        assert before[2] == ["default", "kb-a"]
        for method, path, body in ANONYMOUS_CALLS:
            answers = {kb: strip_kb(http.request(method, f"/kbs/{kb}{path}", json=body), kb)
                       for kb in ("kb-a", "kb-b", UNKNOWN)}
            assert len(set(map(repr, answers.values()))) == 1, (path, answers)
            status, content, headers = answers["kb-a"]
            assert status == 401 and ("www-authenticate", "Bearer") in headers, (path, content)
        readyz = http.get("/kbs/kb-b/readyz")
        match = http.post("/kbs/kb-b/match", json={"query": "parking"})
        assert readyz.json() == match.json(), "readyz refuses as /match does"
        for _ in range(15):
            for kb in (*KBS, UNKNOWN):
                assert http.get(f"/kbs/{kb}/readyz").status_code == 401
        assert churn(app) == before
        assert http.get("/readyz").status_code == 200, "the default KB's bare readyz needs no token"


@pytest.mark.parametrize("requires_key", [False, True])
def test_readyz_with_a_token_loads_and_answers_as_before(built, encoder, requires_key):  # noqa: F811
    _, _, tokens = built
    app = app_for(built, encoder, match_requires_key=requires_key)
    with TestClient(app) as client:
        for token in (tokens["kb-b", "read"], tokens["kb-b", "admin"], ROOT):
            ready = client.get("/kbs/kb-b/readyz", headers=bearer(token))
            assert ready.status_code == 200 and ready.json()["ready"] is True, ready.text
        assert churn(app)[:2] == (1, 0), "loaded once, for the first caller with a token"
        assert client.get(f"/kbs/{UNKNOWN}/readyz", headers=bearer(ROOT)).status_code == 404
        # a token that is sent is checked, as /match checks it
        assert client.get("/kbs/kb-c/readyz", headers=bearer(tokens["kb-b", "read"])).status_code == 403
        assert client.get(f"/kbs/{UNKNOWN}/readyz", headers=bearer(tokens["kb-b", "read"])).status_code == 403
        refused = client.get("/kbs/kb-c/readyz", headers=bearer("faqkb_made-up"))
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert churn(app)[:2] == (1, 0)


def test_metrics_token_guards_metrics(built, encoder):  # noqa: F811
    _, _, tokens = built
    with TestClient(app_for(built, encoder)) as client:
        assert client.get("/metrics").status_code == 200, "unset: open, as before"
    with TestClient(app_for(built, encoder, metrics_token=METRICS)) as client:
        for headers in ({}, bearer("wrong"), bearer(METRICS + "x"), bearer(tokens["kb-a", "admin"]),
                        {"Authorization": METRICS}):
            refused = client.get("/metrics", headers=headers)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer", headers
            assert "FAQ_METRICS_TOKEN" in refused.json()["error"] and "faq_http" not in refused.text
        for token in (METRICS, ROOT):
            shown = client.get("/metrics", headers=bearer(token))
            assert shown.status_code == 200 and "faq_http_requests_total" in shown.text
        assert client.get("/kbs/kb-a/metrics", headers=bearer(METRICS)).status_code == 404, "only the bare route"
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200


@pytest.mark.parametrize("kb_labels", [True, False])
def test_metrics_kb_labels_off_names_no_kb(built, encoder, kb_labels):  # noqa: F811
    with TestClient(app_for(built, encoder, metrics_kb_labels=kb_labels)) as client:
        for kb, n in (("kb-a", 2), ("kb-b", 3)):
            for _ in range(n):
                assert client.post(f"/kbs/{kb}/match", json={"query": "is there wifi"}).status_code == 200
        client.get("/kbs/kb-c/readyz")
        client.post(f"/kbs/{UNKNOWN}/match", json={"query": "x"})
        text = client.get("/metrics").text
    queries = {line.split("{", 1)[1].split("}")[0]: float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("faq_kb_match_queries_total{")}
    if kb_labels:
        assert "kb-a" in text and "kb-b" in text
        assert sum(v for k, v in queries.items() if 'kb="kb-a"' in k) == 2
    else:
        assert not [kb for kb in (*KBS, UNKNOWN) if kb in text], "a KB's name in /metrics"
        assert set(queries) and all('kb="_all"' in k for k in queries)
        assert sum(queries.values()) == 5
