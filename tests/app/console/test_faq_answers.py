"""The console's FAQ editor and answers per language: a box per language the FAQ has (emptied: the language goes),
a language picker and box to add one, bad input shown next to the field with the text kept, and the Try page
answering a question with the answer in its language; an import keeps them from its dry run to its apply."""
from __future__ import annotations

import json
import re

import pytest

from tests.helpers.console import served_kbs, sign_in

ROOT = "console-root-token-of-32-characters"
NEW = "/console/kbs/default/faqs/new"
EDIT = "/console/kbs/default/faqs/edit"
ES = "Las tarjetas regalo no caducan nunca."
DE = "Geschenkkarten verfallen nie."
ASKED_ES = "¿Caducan las tarjetas regalo de la tienda?"


@pytest.fixture(scope="module")
def served(tmp_path_factory, encoder):  # noqa: F811
    with served_kbs(tmp_path_factory.mktemp("console_answers"), encoder, ROOT, "shop") as served:
        yield served


def version_of(page: str) -> str:
    return re.search(r'name="version" value="([^"]+)"', page).group(1)


def picker(page: str) -> list[str]:
    """The language codes the add-an-answer picker offers."""
    select = re.search(r'<select id="new_answer_language".*?</select>', page, re.S)
    return re.findall(r'<option value="([a-z]+)"', select.group(0)) if select else []


def test_the_editor_adds_edits_and_removes_answers_per_language(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    page = client.get(NEW).text
    assert picker(page) == ["en", "es", "de", "fr", "it", "pt", "nl"] and 'name="answers_' not in page
    fields = {"csrf": csrf, "faq_id": "gifts", "answer": "Gift cards never expire.",
              "questions": f"Do gift cards expire?\n{ASKED_ES}", "new_answer_language": "es", "new_answer": ES}
    r = client.post(NEW, data=fields, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert store.get_faq("gifts").answers == {"es": ES}

    page = client.get(EDIT + "?id=gifts").text
    assert f'<textarea id="answers_es" name="answers_es" rows="4">{ES}</textarea>' in page
    assert "es" not in picker(page) and "de" in picker(page)
    save = {"csrf": csrf, "id": "gifts", "version": version_of(page), "answer": "Gift cards never expire.",
            "questions": f"Do gift cards expire?\n{ASKED_ES}", "answers_es": ES + " Nunca.",
            "new_answer_language": "de", "new_answer": DE}
    assert client.post(EDIT, data=save, follow_redirects=False).status_code == 303
    assert store.get_faq("gifts").answers == {"es": ES + " Nunca.", "de": DE}

    page = client.get(EDIT + "?id=gifts").text  # an emptied box removes its language, the others stay
    assert picker(page) == ["en", "fr", "it", "pt", "nl"]
    save = {**save, "version": version_of(page), "answers_es": "  ", "answers_de": DE, "new_answer_language": "",
            "new_answer": ""}
    assert client.post(EDIT, data=save, follow_redirects=False).status_code == 303
    assert store.get_faq("gifts").answers == {"de": DE}

    page = client.get(EDIT + "?id=gifts").text
    save = {**save, "version": version_of(page), "answers_es": ES}
    del save["answers_de"]  # left out of the post: gone too, as the form's whole set replaces the stored one
    assert client.post(EDIT, data=save, follow_redirects=False).status_code == 303
    assert store.get_faq("gifts").answers == {"es": ES}


def test_a_question_in_the_language_gets_that_answer_on_try(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    r = client.post(NEW, follow_redirects=False, data={
        "csrf": csrf, "faq_id": "gifts2", "answer": "Gift vouchers can be used online.",
        "questions": "¿Puedo usar el vale regalo en la web?", "new_answer_language": "es",
        "new_answer": "Los vales regalo se pueden usar en la web."})
    assert r.status_code == 303, r.text  # matchable at once: the console refreshes the served KB
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "¿Puedo usar el vale regalo en la web?"})
    assert r.status_code == 200, r.text
    assert "Los vales regalo se pueden usar en la web." in r.text
    r = client.post("/console/kbs/default/try", data={"csrf": csrf, "query": "Can I use the gift voucher online?"})
    assert r.status_code == 200 and "Los vales regalo" not in r.text
    assert store.delete_faq("gifts2")


@pytest.mark.parametrize("bad", [
    {"new_answer_language": "", "new_answer": "Sin idioma"},
    {"new_answer_language": "xx", "new_answer": "Unknown language"},
    {"answers_xx": "Crafted field"},
    {"answers_es": "x" * 20001},
    {"answers_es": "Uno", "new_answer_language": "es", "new_answer": "Dos"},
])
def test_bad_answers_are_shown_next_to_the_field_and_keep_the_text(served, bad):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    fields = {"csrf": csrf, "faq_id": "bad_answers", "answer": "An answer.", "questions": "my kept phrasing", **bad}
    r = client.post(NEW, data=fields)
    assert r.status_code == 422 and 'id="answers-error"' in r.text, (bad, r.text)
    assert "answers" in re.search(r'id="answers-error">([^<]*)<', r.text).group(1)
    assert "my kept phrasing" in r.text
    if bad.get("new_answer"):
        assert bad["new_answer"] in r.text
    assert store.get_faq("bad_answers") is None


def test_an_import_keeps_answers_from_its_dry_run_to_its_apply_and_exports_them(served):
    store = served[1]
    client, csrf = sign_in(served, ROOT)
    row = {"faq_id": "vouchers", "question": "Do vouchers expire?", "answer": "Never.",
           "answers": {"es": "Nunca.", "nl": "Nooit."}}
    r = client.post("/console/kbs/default/import", data={"csrf": csrf},
                    files={"file": ("answers.jsonl", (json.dumps(row) + "\n").encode(), "application/octet-stream")})
    assert r.status_code == 200, r.text
    import_id = re.search(r'name="import_id" value="([^"]+)"', r.text).group(1)
    r = client.post("/console/kbs/default/import/apply", data={"csrf": csrf, "import_id": import_id})
    assert r.status_code == 200, r.text
    assert store.get_faq("vouchers").answers == {"es": "Nunca.", "nl": "Nooit."}
    line = next(json.loads(x) for x in client.get("/console/kbs/default/export").text.splitlines()
                if json.loads(x)["faq_id"] == "vouchers")
    assert line["answers"] == {"es": "Nunca.", "nl": "Nooit."}
    assert store.delete_faq("vouchers")
