"""Many KBs in one service: /kbs/{kb} routes, per-KB tokens on every admin route, read keys, the
resident-KB budget, per-KB settings followed live, the query log per KB and a hot swap of one KB under load."""
from __future__ import annotations

import threading

import httpx
import pytest
from fastapi.testclient import TestClient

from app.api import resident_kbs as resident_kbs_module
from app.api.main import create_app
from tests.helpers.api import bearer, build, make_settings, make_store, shop_records, two_built_kbs
from tests.helpers.server import LiveServer
from tests.helpers.waiting import until

ROOT = "root-admin-token-of-32-characters"


@pytest.fixture
def kbs(tmp_path, encoder):  # noqa: F811
    """The default KB and KB `shop`, both built, with an admin and a read token each."""
    settings, store = two_built_kbs(tmp_path, encoder, ROOT)
    tokens = {(kb, kind): store.catalog.issue_token(kb, kind)[1] for kb in ("default", "shop") for kind in ("admin", "read")}
    return settings, store, tokens


def top_faq(response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["matches"][0]["faq_id"]


def test_each_kb_answers_from_its_own_faqs(kbs, encoder):  # noqa: F811
    settings, store, _ = kbs
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        assert top_faq(client.post("/kbs/shop/match", json={"query": "may I bring my dog"})) == "pets"
        assert top_faq(client.post("/match", json={"query": "may I bring my dog"})) != "pets"
        assert top_faq(client.post("/kbs/default/match", json={"query": "I forgot my password"})) == "reset_password"
        r = client.post("/kbs/shop/match/batch", json={"queries": [{"query": "where to park"}, {"query": "wifi?"}]})
        assert [res["matches"][0]["faq_id"] for res in r.json()["results"]] == ["parking", "wifi"]
        versions = {client.post(p, json={"query": "x"}).json()["index_version"] for p in ("/match", "/kbs/shop/match")}
        assert len(versions) == 2, "each KB serves its own build"
        ready = client.get("/kbs/shop/readyz")
        assert ready.status_code == 200 and ready.json()["index_version"] in versions
        assert client.get("/kbs/shop/readyz").json()["index_version"] != client.get("/readyz").json()["index_version"]
        assert client.get("/kbs/nope/readyz").status_code == 404


@pytest.mark.parametrize("name", ["nope", "other-kb"])
def test_unknown_kb_is_404_naming_it(kbs, encoder, name):  # noqa: F811
    settings, store, _ = kbs
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        for method, path, body in [("POST", "/match", {"query": "x"}), ("POST", "/match/batch", {"queries": [{"query": "x"}]}),
                                   ("POST", "/feedback", {"request_id": "r", "correct": True}),
                                   ("GET", "/admin/faqs", None)]:
            r = client.request(method, f"/kbs/{name}{path}", json=body, headers=bearer(ROOT))
            assert r.status_code == 404 and repr(name) in r.json()["error"], (path, r.text)


@pytest.mark.parametrize("name", ["Shop", "-shop", "shop!", "a" * 65, "sh op", "%00"])
def test_malformed_kb_name_is_422(kbs, encoder, name):  # noqa: F811
    settings, store, tokens = kbs
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        for token in (ROOT, tokens["shop", "admin"]):
            for method, path in [("POST", "/match"), ("GET", "/admin/faqs")]:
                r = client.request(method, f"/kbs/{name}{path}", json={"query": "x"}, headers=bearer(token))
                assert r.status_code in (404, 422), (name, path, r.text)  # 404: a path the router cannot split
                if r.status_code == 422:
                    assert r.json()["detail"][0]["field"] == "kb", r.text


def admin_calls(kb_prefix: str, faq_id: str) -> list[tuple[str, str, dict | None]]:
    """One call per admin operation, valid for the KB it targets."""
    base = f"{kb_prefix}/admin"
    return [
        ("GET", f"{base}/faqs", None),
        ("POST", f"{base}/faqs", {"faq_id": "intruder", "answer": "x", "questions": ["planted question"]}),
        ("GET", f"{base}/faqs/{faq_id}", None),
        ("PUT", f"{base}/faqs/{faq_id}", {"answer": "overwritten", "questions": ["overwritten"]}),
        ("PATCH", f"{base}/faqs/{faq_id}", {"answer": "patched"}),
        ("DELETE", f"{base}/faqs/{faq_id}", None),
        ("GET", f"{base}/index", None),
        ("POST", f"{base}/index/reload", None),
        ("GET", f"{base}/review", None),
        ("POST", f"{base}/review/phrasings/{REVIEW_KEY}/accept", None),
        ("POST", f"{base}/review/dismissals", {"queue": "lint", "faq_id": faq_id, "reason": "planted"}),
        ("GET", f"{base}/review/dismissals", None),
        ("DELETE", f"{base}/review/dismissals/lint/{REVIEW_KEY}", None),
        ("GET", f"{base}/audit", None),
        ("POST", f"{base}/publish", {"note": "planted"}),
        ("GET", f"{base}/published", None),
        ("POST", f"{base}/rollback", {"to": 1}),
        ("GET", f"{base}/diff", None),
    ]


REVIEW_KEY = "ab" * 32


def test_admin_calls_cover_every_admin_operation(kbs, encoder):  # noqa: F811
    settings, store, _ = kbs
    app = create_app(settings, store=store, encoder=encoder)
    documented = {(method.upper(), path) for path, ops in app.openapi()["paths"].items()
                  for method in ops if "/admin" in path}
    covered = {(m, p.replace("/kbs/shop", "/kbs/{kb}").replace("/parking", "/{faq_id}")
                .replace(REVIEW_KEY, "{key}").replace("/dismissals/lint/", "/dismissals/{queue}/"))
               for prefix in ("", "/kbs/shop") for m, p, _ in admin_calls(prefix, "parking")}
    assert documented == covered


def snapshot(store) -> dict:
    """Everything an admin route could change, per KB."""
    return {kb: (sorted(map(repr, store.for_kb(kb).export_records())), store.for_kb(kb).revision(),
                 store.for_kb(kb).reviews.dismissed(), store.for_kb(kb).publications.latest_id())
            for kb in ("default", "shop")}


def test_a_kb_token_never_reads_or_changes_another_kb(kbs, encoder):  # noqa: F811
    settings, store, tokens = kbs
    before = snapshot(store)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        served = {p: client.post(p, json={"query": "x"}).json()["index_version"] for p in ("/match", "/kbs/shop/match")}
        foreign = [  # (token, KB prefix it must not reach, an FAQ of that KB)
            (tokens["shop", "admin"], "", "refund"), (tokens["shop", "admin"], "/kbs/default", "refund"),
            (tokens["default", "admin"], "/kbs/shop", "parking"),
            (tokens["shop", "admin"], "/kbs/nope", "refund"),  # an unknown KB: 403 too, its existence stays hidden
        ]
        for token, prefix, faq_id in foreign:
            for method, path, body in admin_calls(prefix, faq_id):
                r = client.request(method, path, json=body, headers=bearer(token))
                assert r.status_code == 403, (method, path, r.status_code, r.text)
                assert "another KB" in r.json()["error"] and faq_id not in r.text
        # read keys hold no role, not even on their own KB
        for kb, prefix, faq_id in [("shop", "/kbs/shop", "parking"), ("default", "", "refund")]:
            for method, path, body in admin_calls(prefix, faq_id):
                assert client.request(method, path, json=body, headers=bearer(tokens[kb, "read"])).status_code == 403
        assert snapshot(store) == before, "nothing changed"
        assert {p: client.post(p, json={"query": "x"}).json()["index_version"] for p in served} == served
        # and each token does reach its own KB
        r = client.get("/kbs/shop/admin/faqs/parking", headers=bearer(tokens["shop", "admin"]))
        assert r.status_code == 200 and r.json()["faq_id"] == "parking"
        assert client.get("/admin/faqs/refund", headers=bearer(tokens["default", "admin"])).status_code == 200
        assert client.get("/kbs/default/admin/faqs/refund", headers=bearer(tokens["default", "admin"])).status_code == 200
        # the global token reaches both
        assert client.get("/kbs/shop/admin/faqs/parking", headers=bearer(ROOT)).status_code == 200
        assert client.get("/admin/faqs/parking", headers=bearer(ROOT)).status_code == 404, "KB default has none"


def test_kb_admin_writes_stay_in_their_kb(kbs, encoder):  # noqa: F811
    settings, store, tokens = kbs
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        h = bearer(tokens["shop", "admin"])
        r = client.post("/kbs/shop/admin/faqs", headers=h,
                        json={"faq_id": "refund", "answer": "Shop refunds at the till.", "questions": ["shop refund"]})
        assert r.status_code == 201, "the same faq_id exists in KB default: KBs do not share ids"
        assert top_faq(client.post("/kbs/shop/match", json={"query": "shop refund"})) == "refund"
        assert store.get_faq("refund").answer != "Shop refunds at the till."
        assert store.for_kb("shop").get_faq("refund").answer == "Shop refunds at the till."
        assert client.delete("/kbs/shop/admin/faqs/refund", headers=h).status_code == 204
        assert store.get_faq("refund") is not None, "KB default's refund is untouched"


def test_revoked_token_stops_working(kbs, encoder, monkeypatch):  # noqa: F811
    settings, store, tokens = kbs
    monkeypatch.setattr(resident_kbs_module, "TOKEN_CACHE_S", 0.0)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        h = bearer(tokens["shop", "admin"])
        assert client.get("/kbs/shop/admin/faqs", headers=h).status_code == 200
        [info] = [t for t in store.catalog.tokens("shop") if t.kind == "admin"]
        assert store.catalog.revoke_token("shop", info.id)
        assert client.get("/kbs/shop/admin/faqs", headers=h).status_code == 401


def test_read_keys_guard_match_when_required(kbs, encoder):  # noqa: F811
    settings, store, tokens = kbs
    settings = settings.model_copy(update={"match_requires_key": True})
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        query = {"query": "where can I park"}
        assert client.post("/kbs/shop/match", json=query).status_code == 401
        assert client.post("/match", json=query).status_code == 401
        assert client.post("/kbs/shop/match", json=query, headers=bearer("faqkb_made-up")).status_code == 401
        for token in (tokens["shop", "read"], tokens["shop", "admin"], ROOT):
            assert top_faq(client.post("/kbs/shop/match", json=query, headers=bearer(token))) == "parking"
        assert client.post("/match", json=query, headers=bearer(tokens["shop", "read"])).status_code == 403
        assert client.post("/kbs/default/match/batch", json={"queries": [query]},
                           headers=bearer(tokens["shop", "read"])).status_code == 403
        rid = client.post("/kbs/shop/match", json=query, headers=bearer(tokens["shop", "read"])).json()["request_id"]
        fb = {"request_id": rid, "correct": True}
        assert client.post("/kbs/shop/feedback", json=fb).status_code == 401
        assert client.post("/kbs/shop/feedback", json=fb, headers=bearer(tokens["default", "read"])).status_code == 403
        assert client.post("/kbs/shop/feedback", json=fb, headers=bearer(tokens["shop", "read"])).status_code == 200


def test_query_log_and_feedback_are_per_kb(kbs, encoder):  # noqa: F811
    settings, store, _ = kbs
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        rid = client.post("/kbs/shop/match", json={"query": "is there wifi"}).json()["request_id"]
        client.post("/match", json={"query": "opening hours please"})
        # a request of KB shop is unknown to KB default: no feedback through it
        assert client.post("/feedback", json={"request_id": rid, "correct": True}).status_code == 404
        assert client.post("/kbs/shop/feedback", json={"request_id": rid, "faq_id": "refund"}).status_code == 422
        assert client.post("/kbs/shop/feedback", json={"request_id": rid, "correct": True}).status_code == 200
        metrics = client.get("/metrics").text
    shop_log = store.for_kb("shop").read_query_log()
    assert [r["query"] for r in shop_log] == ["is there wifi"] and shop_log[0]["feedback_correct"] is True
    assert [r["query"] for r in store.read_query_log()] == ["opening hours please"]
    assert 'faq_kb_match_queries_total{decision=' in metrics and 'kb="shop"' in metrics


def test_resident_kbs_stay_within_budget(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, max_resident_kbs=2)
    store = make_store(settings)
    build(store, encoder, settings)
    for name in ("a", "b", "c"):
        store.catalog.create(name)
        store.for_kb(name).import_records(shop_records())
        build(store.for_kb(name), encoder, settings.for_kb(name))
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        resident_kbs = app.state.resident_kbs
        for name in ("a", "b", "c", "a"):
            assert top_faq(client.post(f"/kbs/{name}/match", json={"query": "can my dog come"})) == "pets"
            assert len(resident_kbs.resident()) <= 2, [s.kb for s in resident_kbs.resident()]
        assert [s.kb for s in resident_kbs.resident()] == ["default", "a"]
        assert resident_kbs.loads == 4 and resident_kbs.unloads == 3
        # a KB in use is never unloaded: the budget gives way for that moment instead
        busy = resident_kbs.peek("a")
        busy.in_flight += 1
        try:
            client.post("/kbs/b/match", json={"query": "parking"})
            assert {s.kb for s in resident_kbs.resident()} == {"default", "a", "b"}
        finally:
            busy.in_flight -= 1
        client.post("/kbs/c/match", json={"query": "parking"})
        assert len(resident_kbs.resident()) == 2
        assert "faq_kbs_resident 2.0" in client.get("/metrics").text
        # the shared encoder: every KB built with it holds the same object
        assert resident_kbs.peek("c").encoder is app.state.service.encoder


def test_an_unloaded_kb_is_freed_at_once(tmp_path, encoder):  # noqa: F811
    """Its state, pipeline and index go when its last reference does, without waiting for the cyclic
    garbage collector (which a busy process runs rarely): memory follows FAQ_MAX_RESIDENT_KBS."""
    import gc
    import weakref

    settings = make_settings(tmp_path, max_resident_kbs=2)
    store = make_store(settings)
    for name in ("a", "b"):
        store.catalog.create(name)
        store.for_kb(name).import_records(shop_records())
        build(store.for_kb(name), encoder, settings.for_kb(name))
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        client.post("/kbs/a/match", json={"query": "dog"})
        state = app.state.resident_kbs.peek("a")
        gone = [weakref.ref(state), weakref.ref(state.retriever), weakref.ref(state.pipeline)]
        del state
        gc.collect()
        gc.disable()
        try:
            client.post("/kbs/b/match", json={"query": "dog"})  # unloads a
            assert [ref() is None for ref in gone] == [True, True, True]
        finally:
            gc.enable()


def test_kbs_share_one_encoder_even_with_an_empty_default_kb(tmp_path, encoder):  # noqa: F811
    settings = make_settings(tmp_path, encoder_runtime="torch")
    store = make_store(settings, records=[])  # the default KB: no FAQs, no build
    for name in ("a", "b"):
        store.catalog.create(name)
        store.for_kb(name).import_records(shop_records())
        build(store.for_kb(name), encoder, settings.for_kb(name))
    app = create_app(settings, store=store)  # encoders loaded by the service itself
    with TestClient(app) as client:
        for name in ("a", "b"):
            assert top_faq(client.post(f"/kbs/{name}/match", json={"query": "can my dog come"})) == "pets"
        resident_kbs = app.state.resident_kbs
        assert resident_kbs.peek("a").encoder is resident_kbs.peek("b").encoder is app.state.service.encoder


def test_kb_settings_are_followed_live(kbs, encoder):  # noqa: F811
    settings, store, _ = kbs
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        query = {"query": "where can I park"}
        assert client.post("/kbs/shop/match", json=query).json()["threshold"] != 0.97
        store.catalog.set_settings("shop", {"default_threshold": 0.97, "ab_split": "lexical:1"})
        store.catalog.set_settings("default", {"default_threshold": 0.91})
        app.state.housekeeping.poll_all()
        r = client.post("/kbs/shop/match", json=query).json()
        assert r["threshold"] == 0.97 and r["arm"] == "lexical"
        r = client.post("/match", json=query).json()
        assert r["threshold"] == 0.91 and r["arm"] == "ann"
        store.catalog.delete("shop")
        app.state.housekeeping.poll_all()
        assert client.post("/kbs/shop/match", json=query).status_code == 404


def test_hot_swap_of_one_kb_under_load(kbs, encoder):  # noqa: F811
    settings, store, _ = kbs
    app = create_app(settings.model_copy(update={"kb_poll_seconds": 0}), store=store, encoder=encoder)
    failures: list[str] = []
    seen: dict[str, set[str]] = {"/match": set(), "/kbs/shop/match": set()}
    answered: dict[str, int] = {path: 0 for path in seen}
    lock = threading.Lock()
    stop = threading.Event()

    def client_loop(path: str) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            while not stop.is_set():
                try:
                    r = client.post(path, json={"query": "can I bring my dog"})
                    with lock:
                        if r.status_code != 200:
                            failures.append(f"{path} {r.status_code}: {r.text[:200]}")
                        else:
                            seen[path].add(r.json()["index_version"])
                            answered[path] += 1
                except Exception as exc:  # noqa: BLE001 - a connection error is a failure too
                    with lock:
                        failures.append(repr(exc))

    def answers_after(counts: dict[str, int], more: int) -> None:
        """Wait until each path has answered `more` requests beyond `counts` (or something failed)."""
        def done() -> bool:
            with lock:
                return bool(failures) or all(answered[p] >= counts[p] + more for p in answered)
        until(done, 60, f"{more} more answers per KB")

    with LiveServer(app) as server:
        threads = [threading.Thread(target=client_loop, args=(p,)) for p in seen for _ in range(4)]
        for t in threads:
            t.start()
        answers_after({p: 0 for p in seen}, 4)  # both KBs are under load before the swap
        shop = store.for_kb("shop")
        shop.create_faq("toilets", "Toilets are next to the entrance.", ["Where are the toilets?"])
        v2 = build(shop, app.state.service.encoder, settings.for_kb("shop"))["version"]
        with httpx.Client(base_url=server.url, timeout=60) as admin:
            r = admin.post("/kbs/shop/admin/index/reload", headers=bearer(ROOT))
            assert r.status_code == 200 and r.json()["version"] == v2, r.text
            with lock:
                reloaded = dict(answered)
            # beyond the 4 threads' requests in flight during the reload: each path answers after it too
            answers_after(reloaded, 8)
            stop.set()
            for t in threads:
                t.join(60)
    assert not failures, failures[:5]
    assert v2 in seen["/kbs/shop/match"] and len(seen["/kbs/shop/match"]) == 2
    assert len(seen["/match"]) == 1, "the default KB's index was not touched"


def test_faq_kb_is_the_cli_default_not_the_services(kbs, encoder):  # noqa: F811
    settings, store, _ = kbs
    with TestClient(create_app(settings.model_copy(update={"kb": "shop"}), store=store, encoder=encoder)) as client:
        assert top_faq(client.post("/match", json={"query": "I forgot my password"})) == "reset_password"
        assert top_faq(client.post("/kbs/shop/match", json={"query": "can my dog come in"})) == "pets"


def test_elasticsearch_vector_store_serves_every_kb_like_annoy(tmp_path, encoder, es_emulator_url):  # noqa: F811
    """FAQ_VECTOR_STORE=elasticsearch (the emulator here): builds write each KB's vectors into its own
    index, `faq serve` searches them by kNN, and every answer equals the in-process index's."""
    import uuid

    from index.elasticsearch.vectors import delete_kb_vectors, open_registry
    from app.release import build_current

    prefix = f"t{uuid.uuid4().hex[:8]}"
    settings = make_settings(tmp_path, vector_store="elasticsearch", es_url=es_emulator_url, es_index_prefix=prefix,
                             es_timeout_s=10, lexical_engine="tantivy")
    store = make_store(settings)
    store.catalog.create("shop")
    store.for_kb("shop").import_records(shop_records())
    for kb in ("default", "shop"):
        scoped = settings.for_kb(kb)
        build_current(store.for_kb(kb), encoder, open_registry(scoped), n_trees=5, lexical=False)
    queries = {"/match": ["I forgot my password", "when will my parcel arrive", "refund please"],
               "/kbs/shop/match": ["can my dog come in", "where do I park the car", "wifi name"]}
    answers = {}
    try:
        for store_kind in ("elasticsearch", "annoy"):
            app = create_app(settings.model_copy(update={"vector_store": store_kind}), store=store, encoder=encoder)
            with TestClient(app) as client:
                answers[store_kind] = [
                    [(m["faq_id"], round(m["score"], 5)) for m in client.post(path, json={"query": q}).json()["matches"]]
                    for path, qs in queries.items() for q in qs]
                served = [app.state.service.retriever, app.state.resident_kbs.peek("shop").retriever]
                # kNN in the store, or Annoy/exact search in process
                assert all((r._backend is not None) == (store_kind == "elasticsearch") for r in served)
    finally:
        for kb in ("default", "shop"):
            delete_kb_vectors(es_emulator_url, prefix, kb)
    assert answers["elasticsearch"] == answers["annoy"]
    assert answers["annoy"][3][0][0] == "pets"


def test_queries_to_different_kbs_share_one_encoder_call(kbs, encoder):  # noqa: F811
    from app.match import MatchQuery, run_pipelines

    class Counting:
        def __init__(self, inner):
            self.inner, self.calls, self.id, self.dim = inner, [], inner.id, inner.dim

        def encode(self, texts, **kw):
            self.calls.append(len(texts))
            return self.inner.encode(texts, **kw)

    settings, store, _ = kbs
    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        client.post("/kbs/shop/match", json={"query": "load it"})
        default, shop = app.state.service, app.state.resident_kbs.peek("shop")
        counting = Counting(encoder)
        default.pipeline.encoder = shop.pipeline.encoder = counting
        work = [(default.pipeline, ([MatchQuery("I forgot my password")], default.retriever, None)),
                (shop.pipeline, ([MatchQuery("can my dog come in"), MatchQuery("parking?")], shop.retriever, None))]
        outcomes = run_pipelines(work)
    assert counting.calls == [3], "one encoder call for both KBs"
    assert [r.matches[0].faq_id for r in outcomes[0]] == ["reset_password"]
    assert [r.matches[0].faq_id for r in outcomes[1]] == ["pets", "parking"]
