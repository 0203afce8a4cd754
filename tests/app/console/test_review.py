"""The console's review page over HTTP: mined phrasings (accept, dismiss), unanswered clusters (draft a
new FAQ, dismiss), lint findings (dismiss with a reason, restore), and the CLI leaving out what was
dismissed. The browser walks the same page in test_browser.py."""
from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from app.curation.mining import mine_report
from app.store.reviews import cluster_key, lint_key, phrasing_key
from tests.helpers.api import two_built_kbs
from tests.helpers.console import sign_in

ROOT = "review-root-token-of-32-characters"
#: an FAQ whose answer stops mid-sentence: lint flags it
CUT_OFF = ("gift_wrap", "Gift wrapping is available for", ["Can you gift wrap my order?", "Do you offer gift wrapping?"])
#: asked, then marked "the right FAQ is reset_password": proposed as its phrasing
NEW_PHRASING = "password gone, what now"
#: asked twice, marked wrong: an unanswered cluster
UNANSWERED = ["Do you sell gift cards?", "do you sell gift cards"]
#: other words, the same question: the service's queues merge it in by the encoder's cosine (0.87 with MiniLM)
REWORDED = "Are gift cards sold here?"


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    settings, store = two_built_kbs(tmp_path_factory.mktemp("console_review"), encoder, ROOT)
    faq_id, answer, questions = CUT_OFF
    store.create_faq(faq_id, answer, questions)
    shop_token = store.catalog.issue_token("shop", "admin")[1]
    from app.api.main import create_app

    app = create_app(settings, store=store, encoder=encoder)
    with TestClient(app) as client:
        for query, feedback in [(NEW_PHRASING, {"faq_id": "reset_password"}),
                                ("I want my money back now", {"faq_id": "refund"}),
                                *[(q, {"correct": False}) for q in [*UNANSWERED, REWORDED]]]:
            r = client.post("/match", json={"query": query})
            assert r.status_code == 200, r.text
            f = client.post("/feedback", json={"request_id": r.json()["request_id"], **feedback})
            assert f.status_code == 200, f.text
        yield app, store, shop_token, client


def review_page(client: TestClient, kb: str = "default", wait_for_lint: bool = True) -> str:
    """The review page, once its lint has run (it starts in the background on the first visit)."""
    deadline = time.monotonic() + 60
    while True:
        r = client.get(f"/console/kbs/{kb}/review")
        assert r.status_code == 200, r.text
        if not wait_for_lint or 'id="lint-running"' not in r.text:
            return r.text
        assert time.monotonic() < deadline, "lint did not finish"
        time.sleep(0.2)


def test_accepting_a_mined_phrasing_adds_it_and_match_uses_it(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    key = phrasing_key("reset_password", NEW_PHRASING)
    page = review_page(client, wait_for_lint=False)
    assert f'data-key="{key}"' in page and NEW_PHRASING in page
    r = client.post("/console/kbs/default/review/accept", data={"csrf": csrf, "key": key}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert NEW_PHRASING in store.get_faq("reset_password").questions
    assert f'data-key="{key}"' not in review_page(client, wait_for_lint=False)
    match = client.post("/match", json={"query": NEW_PHRASING}).json()
    assert match["matches"][0]["faq_id"] == "reset_password" and match["matches"][0]["question"] == NEW_PHRASING
    # accepting it again: no longer proposed, nothing changes
    before = store.revision()
    again = client.post("/console/kbs/default/review/accept", data={"csrf": csrf, "key": key})
    assert again.status_code == 409 and "no longer proposed" in again.text
    assert store.revision() == before


def test_dismissing_a_phrasing_hides_it_from_the_console_and_the_cli(served, capsys):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    key = phrasing_key("refund", "I want my money back now")
    assert key in [p["review_key"] for p in mine_report(store)["phrasings"]]
    r = client.post("/console/kbs/default/review/dismiss",
                    data={"csrf": csrf, "queue": "phrasing", "key": key, "reason": "too chatty"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    page = review_page(client, wait_for_lint=False)
    assert f'<tr data-key="{key}">' in page.split('id="dismissed"')[1] and "too chatty" in page
    assert f'<tr data-key="{key}">' not in page.split('id="dismissed"')[0]
    report = mine_report(store)
    assert key not in [p["review_key"] for p in report["phrasings"]] and report["stats"]["dismissed_phrasings"] == 1
    assert key in [p["review_key"] for p in mine_report(store, include_dismissed=True)["phrasings"]]
    [d] = [d for d in store.reviews.dismissed("phrasing") if d.key == key]
    assert (d.subject, d.reason, d.dismissed_by) == ("refund: I want my money back now", "too chatty", "FAQ_ADMIN_TOKEN")
    # restore: proposed again
    r = client.post("/console/kbs/default/review/restore", data={"csrf": csrf, "queue": "phrasing", "key": key},
                    follow_redirects=False)
    assert r.status_code == 303
    assert key in [p["review_key"] for p in mine_report(store)["phrasings"]]


def test_an_unanswered_cluster_opens_as_a_draft_and_leaves_once_saved(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    [cluster] = [c for c in mine_report(store)["clusters"] if "gift cards" in c["queries"][0]["query"].lower()]
    key = cluster["review_key"]
    assert key == cluster_key(cluster["key"]) and f'data-key="{key}"' in review_page(client, wait_for_lint=False)
    assert REWORDED not in str(cluster["queries"]), "word keys alone keep it apart"
    draft = client.get(f"/console/kbs/default/review/draft?key={key}")
    assert draft.status_code == 200 and 'id="draft-note"' in draft.text
    assert 'value="sell-gift-cards"' in draft.text and "Do you sell gift cards?" in draft.text
    assert REWORDED in draft.text, "the encoder merged the reworded question in"
    r = client.post("/console/kbs/default/faqs/new", follow_redirects=False, data={
        "csrf": csrf, "faq_id": "gift_cards", "answer": "We do not sell gift cards yet.",
        "questions": "\n".join([*UNANSWERED, REWORDED]), "tags": ""})
    assert r.status_code == 303, r.text
    assert key not in [c["review_key"] for c in mine_report(store)["clusters"]]
    assert client.post("/match", json={"query": UNANSWERED[0]}).json()["matches"][0]["faq_id"] == "gift_cards"
    gone = client.get(f"/console/kbs/default/review/draft?key={key}")
    assert gone.status_code == 404 and "no longer proposed" in gone.text


def test_a_lint_finding_needs_a_reason_to_be_dismissed_and_comes_back_when_restored(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    faq_id, answer, _ = CUT_OFF
    key = lint_key(faq_id, answer)
    page = review_page(client)
    findings = page.split('id="lint"')[1].split('id="dismissed"')[0]
    assert f'data-key="{key}"' in findings and f'href="/console/kbs/default/faqs/edit?id={faq_id}"' in findings
    no_reason = client.post("/console/kbs/default/review/dismiss",
                            data={"csrf": csrf, "queue": "lint", "key": key, "reason": "  "})
    assert no_reason.status_code == 422 and f'id="error-{key[:16]}"' in no_reason.text
    assert "a reason is needed" in no_reason.text and store.reviews.dismissed("lint") == []
    r = client.post("/console/kbs/default/review/dismiss", follow_redirects=False,
                    data={"csrf": csrf, "queue": "lint", "key": key, "reason": "the sentence ends on the site"})
    assert r.status_code == 303
    assert f'data-key="{key}"' not in review_page(client).split('id="lint"')[1].split('id="dismissed"')[0]
    # the CLI leaves it out too (app/curation/review.py hide_dismissed_lint is what `faq kb lint` calls)
    from app.curation.review import hide_dismissed_lint
    from kb.lint import lint_kb

    report = lint_kb(list(store.export_records()))
    assert faq_id in [f.faq_id for f in report.flagged]
    assert hide_dismissed_lint(store, report) == 1 and faq_id not in [f.faq_id for f in report.flagged]
    assert [f.dismissed for f in report.faqs if f.faq_id == faq_id] == ["the sentence ends on the site"]
    client.post("/console/kbs/default/review/restore", data={"csrf": csrf, "queue": "lint", "key": key})
    assert f'data-key="{key}"' in review_page(client).split('id="lint"')[1].split('id="dismissed"')[0]


def test_bad_review_posts_change_nothing(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    before = (store.revision(), store.reviews.dismissed())
    key = "a" * 64
    cases = [
        ("/review/accept", {"csrf": csrf, "key": "nope"}, 422, "key"),
        ("/review/accept", {"key": key}, 403, "CSRF"),
        ("/review/dismiss", {"csrf": csrf, "queue": "other", "key": key}, 422, "queue"),
        ("/review/dismiss", {"csrf": csrf, "queue": "phrasing", "key": key}, 409, "no longer in its queue"),
        ("/review/dismiss", {"csrf": csrf, "queue": "phrasing", "key": phrasing_key("refund", "I want my money back now"),
                             "reason": "x" * 501}, 422, "at most 500"),
        ("/review/restore", {"csrf": csrf, "queue": "lint", "key": key}, 404, "nothing dismissed"),
    ]
    for path, data, status, text in cases:
        r = client.post(f"/console/kbs/default{path}", data=data)
        assert (r.status_code, text in r.text) == (status, True), (path, data, r.status_code, r.text[:500])
    assert client.get("/console/kbs/default/review?window=1y").status_code == 422
    assert client.get("/console/kbs/default/review/draft?key=zz").status_code == 422
    assert (store.revision(), store.reviews.dismissed()) == before


def test_a_kb_token_reviews_only_its_kb(served):
    store = served[1]
    client, csrf = sign_in(served, served[2])
    assert client.get("/console/kbs/shop/review").status_code == 200
    assert client.get("/console/kbs/default/review").status_code == 403
    key = phrasing_key("refund", "I want my money back now")
    r = client.post("/console/kbs/default/review/dismiss", data={"csrf": csrf, "queue": "phrasing", "key": key})
    assert r.status_code == 403 and store.reviews.dismissed("phrasing") == []
    assert client.post("/console/kbs/default/review/accept", data={"csrf": csrf, "key": key}).status_code == 403
