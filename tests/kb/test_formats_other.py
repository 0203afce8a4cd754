"""Importers of other products' FAQ files (kb/formats/): AWS QnABot exports, Rasa retrieval intents,
Dialogflow knowledge connector FAQ CSVs and FAQ web pages (schema.org FAQPage), each read from a realistic
fixture under tests/fixtures/formats/ and from broken files that must fail with `file:line: reason`."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kb.formats import detect, read_any
from kb.formats.base import faq_groups, slug_id
from kb.formats.faqpage import html_to_text
from kb.formats.rasa import strip_entities
from kb.records import KbFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def faqs_of(imported) -> dict[str, dict]:
    return {f["faq_id"]: f for f in faq_groups(imported.records)}


def errors_of(path: Path | str, name: str, fmt: str | None = None) -> list[str]:
    with pytest.raises(KbFormatError) as info:
        read_any(path, fmt, name=name)
    return info.value.errors


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- AWS QnABot

def test_qnabot_export_is_detected_and_read():
    path = FIXTURES / "qnabot-export.json"
    assert detect(path) == "qnabot"
    imported = read_any(path)
    faqs = faqs_of(imported)
    assert imported.format == "qnabot"
    assert list(faqs) == ["Billing.ReadMeter", "Billing.Estimated", "Billing.DirectDebit", "Billing.Refund",
                          "Moving.Home", "Tariffs.FixedEnd", "Tariffs.Green", "Account.App", "Account.Agent",
                          "Outage.PowerCut"]
    meter = faqs["Billing.ReadMeter"]
    assert meter["questions"] == ["How do I send you a meter reading?", "where do i put my meter reading",
                                  "Can I submit my gas and electricity readings online?", "meter reading"]
    assert meter["answer"].startswith("You can send us a reading any time in the Kestrel app (Account > Meter")
    assert meter["tags"] == ["meter", "readings", "self_service"]  # QnABot's space-separated tags
    assert meter["metadata"]["topic"] == "Billing"
    assert meter["metadata"]["answer_markdown"].startswith("Send a reading any time:\n\n- in the **Kestrel app**")
    assert faqs["Billing.DirectDebit"]["metadata"]["answer_markdown"].count("€60") == 1
    assert faqs["Billing.Estimated"]["questions"][1] == "my bill says estimated, I didn’t ask for that"
    assert faqs["Tariffs.FixedEnd"]["metadata"] == {"topic": "Tariffs"}
    # Handlebars stay in the answer as written
    assert faqs["Account.Agent"]["answer"].endswith("{{setSessionAttr 'nextAction' 'AGENT'}}")


def test_qnabot_quirks_are_noted():
    imported = read_any(FIXTURES / "qnabot-export.json")
    faqs = faqs_of(imported)
    notes = "\n".join(imported.notes)
    # the quiz, the slot type and the text passage are not FAQs
    assert "Kestrel.Quiz.1" not in faqs and "Kestrel_slottype_Fuel" not in faqs
    assert "3 items of other types than qna (quiz: 1, slottype: 1, text: 1): skipped" in notes
    # a markdown answer longer than a metadata value is not kept, and said so
    assert "answer_markdown" not in faqs["Moving.Home"]["metadata"]
    assert "alt.markdown of 1 item is longer than 500 characters" in notes and "(Moving.Home)" in notes
    assert "alt.ssml of 2 items: not kept" in notes and "Outage.PowerCut" in notes
    assert "r (response card) on 1" in notes and "l (Lambda hook) on 1" in notes and "next (next item) on 1" in notes
    assert "conditionalChaining" not in notes  # given empty: nothing was lost
    assert "1 answer with Handlebars" in notes


def test_qnabot_items_without_type_are_qna(tmp_path):
    # QnABot's own examples (markdownSSML.json) leave "type" out
    path = write(tmp_path / "exp.json", json.dumps({"qna": [
        {"qid": "Hours.Shop", "q": ["When does the shop open?"], "a": "9:00 to 18:30, Monday to Saturday.",
         "alt": {"markdown": "**9:00–18:30**, Monday to Saturday"}},
    ]}, indent=2))
    assert detect(path) == "qnabot"
    faq = faqs_of(read_any(path))["Hours.Shop"]
    assert faq["metadata"] == {"answer_markdown": "**9:00–18:30**, Monday to Saturday"}


def test_qnabot_broken_items_are_errors_at_their_qid(tmp_path):
    path = write(tmp_path / "qnabot.json", """{
  "qna": [
    {"qid": "Ok.1", "q": ["Do you deliver on Sundays?"], "a": "No, Monday to Saturday."},
    {
      "qid": "Empty.Questions",
      "q": [],
      "a": "Nobody asks this."
    },
    {
      "qid": "No.Answer",
      "q": ["Where is my order?"],
      "t": ["Orders"]
    }
  ]
}
""")
    assert errors_of(path, "qnabot.json") == [
        "qnabot.json:5: qna[1] (qid 'Empty.Questions') has no questions (q is empty)",
        "qnabot.json:10: qna[2] (qid 'No.Answer') has no answer (a)",
        "qnabot.json:10: qna[2] (qid 'No.Answer'): t (topic) must be a string, got a list",
    ]


def test_qnabot_not_an_export(tmp_path):
    path = write(tmp_path / "other.json", '{"items": [{"qid": "x"}]}')
    assert errors_of(path, "other.json") == [
        'other.json:1: a QnABot export is an object {"qna": [items]}, got no "qna"']
    path = write(tmp_path / "cut.json", '{"qna": [\n  {"qid": "x", "q": ["a"],\n')
    assert errors_of(path, "cut.json")[0].startswith("cut.json:3: invalid JSON")


def test_qnabot_export_without_qna_items_is_an_error(tmp_path):
    path = write(tmp_path / "passages.json", json.dumps({"qna": [
        {"qid": "Passage.Hours", "type": "text", "passage": "The shop opens at 9."},
        {"qid": "Slot.Size", "type": "slottype", "slotTypeValues": [{"samplevalue": "small"}]},
    ]}))
    assert errors_of(path, "passages.json") == [
        "passages.json:1: no items of type qna in this export (other items: slottype: 1, text: 1)"]


# ---------------------------------------------------------------- Rasa

def test_rasa_project_folder_is_detected_and_read():
    path = FIXTURES / "rasa"
    assert detect(path) == "rasa"
    imported = read_any(path, name="rasa")
    faqs = faqs_of(imported)
    assert imported.format == "rasa"
    assert list(faqs) == ["faq/locker_how_it_works", "faq/locker_how_long", "faq/track_parcel", "faq/change_locker",
                          "faq/return_parcel", "faq/locker_full", "faq/lost_code", "faq/price", "faq/opening_hours",
                          "chitchat/ask_name", "chitchat/are_you_human"]
    works = faqs["faq/locker_how_it_works"]
    assert works["questions"] == ["How do parcel lockers work?", "how do i pick up from a locker",
                                  "What do I do when my parcel is in a Parcelo locker?",
                                  "I got a code for a locker, now what?"]
    # a `|` block answer: its lines kept, its final newline not
    assert works["answer"] == (
        "When your parcel arrives we send you an SMS and an email with a 6-digit code and the locker's address.\n"
        "At the locker, tap **Collect**, type the code, and the door of your compartment opens. Close it when "
        "you're done.")
    assert works["metadata"] == {"retrieval_intent": "faq"}
    assert faqs["chitchat/are_you_human"]["metadata"] == {"retrieval_intent": "chitchat"}
    assert faqs["faq/price"]["answer"].startswith("Sending to a locker in France costs from €3.49")
    # the list form of examples (`- text:` with metadata) reads like the block form
    assert faqs["faq/return_parcel"]["questions"] == [
        "How do I send a return through a Parcelo locker?", "return a parcel at a locker",
        "Can I drop off my Zalando return at a locker?"]


def test_rasa_entity_annotations_are_stripped():
    faqs = faqs_of(read_any(FIXTURES / "rasa"))
    assert "I'm away until Friday, will my parcel still be there?" in faqs["faq/locker_how_long"]["questions"]
    assert faqs["faq/track_parcel"]["questions"][1:3] == ["track parcel PX-48213", "Can you tell me where PX-77102 is?"]
    assert "no free locker at Gare de l'Est" in faqs["faq/locker_full"]["questions"]  # [text](entity:value)
    assert strip_entities('book [2]{"entity": "people", "value": "2"} seats in [Lyon](city) on [Friday][{"entity": '
                          '"date"}]') == "book 2 seats in Lyon on Friday"
    assert strip_entities("what does [this] mean (really)?") == "what does [this] mean (really)?"


def test_rasa_skipped_parts_are_noted():
    imported = read_any(FIXTURES / "rasa")
    faqs = faqs_of(imported)
    notes = imported.notes
    # several variants: the first is the answer
    assert faqs["chitchat/ask_name"]["answer"] == ("I'm Parcelo's assistant. I don't have a name, but I know a lot "
                                                   "about lockers.")
    assert ("1 response has several variants; only the first text is kept as the answer (utter_chitchat/ask_name)"
            in notes)
    assert "intents that are not retrieval intents (no '/') skipped: greet, goodbye" in notes
    assert "responses that answer no retrieval intent skipped: utter_greet, utter_goodbye" in notes
    assert "synonym entries skipped: paris-est" in notes
    assert not any(f.startswith(("greet", "goodbye")) for f in faqs)


def test_rasa_single_file_holding_nlu_and_responses():
    path = FIXTURES / "rasa-single.yml"
    assert detect(path) == "rasa"
    imported = read_any(path)
    faqs = faqs_of(imported)
    assert len(faqs) == 8
    assert faqs["help/meeting_rooms"]["questions"] == ["How do I book a meeting room?",
                                                       "need a room for 6 people tomorrow",
                                                       "Are meeting rooms included in my membership?"]
    assert faqs["help/mail"]["questions"][2] == "business address for my company’s registration"
    assert faqs["help/wifi"]["answer"].startswith("Join **HiveDesk-Members** with your app login")
    assert faqs["help/access_hours"]["metadata"] == {"retrieval_intent": "help"}
    assert "responses that answer no retrieval intent skipped: utter_iamabot" in imported.notes


def test_rasa_folder_leaves_out_tests_and_files_that_are_no_training_data(tmp_path):
    project = tmp_path / "bot"
    shutil.copytree(FIXTURES / "rasa", project)
    # `rasa test` data and a cache: an intent there without a response would otherwise be an error
    test_nlu = "nlu:\n- intent: faq/only_in_tests\n  examples: |\n    - is this a test?\n"
    write(project / "tests" / "nlu.yml", test_nlu)
    write(project / "data" / "test_nlu.yml", test_nlu)
    write(project / ".rasa" / "cache" / "nlu.yml", test_nlu)
    assert detect(project) == "rasa"
    assert len(faqs_of(read_any(project))) == 11
    # a folder of YAML that is not Rasa data
    other = write(tmp_path / "ci" / "workflow.yml", "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n")
    with pytest.raises(KbFormatError, match="cannot tell the format"):
        detect(other.parent)
    assert errors_of(other.parent, "ci", "rasa") == [
        "ci: no retrieval intents (intents named like faq/ask_channels) in this Rasa data: only those become FAQs"]


def test_rasa_yaml_aliases_are_read_once(tmp_path):
    path = write(tmp_path / "bot.yml", """nlu:
- intent: faq/opening
  examples: &ex |
    - When are you open?
- intent: faq/hours
  examples: *ex
responses:
  utter_faq/opening: &same
  - text: Every day from 9 to 18.
  utter_faq/hours: *same
""")
    assert errors_of(path, "bot.yml") == [
        "bot.yml:5: the examples of intent 'faq/hours' are another intent's, by a YAML alias; give each intent "
        "its own"]
    path.write_text(path.read_text().replace("examples: *ex", "examples: |\n    - opening hours"))
    faqs = faqs_of(read_any(path))
    assert faqs["faq/hours"]["answer"] == faqs["faq/opening"]["answer"] == "Every day from 9 to 18."


def test_rasa_folder_errors_name_each_file_and_line(tmp_path):
    project = tmp_path / "bot"
    shutil.copytree(FIXTURES / "rasa", project)
    write(project / "data" / "more.yml", """version: "3.1"
nlu:
- intent: faq/gift_cards
  examples: |
    - Do you sell gift cards?
    - gift card for my mum
""")
    domain = (project / "domain.yml").read_text(encoding="utf-8")
    write(project / "domain.yml", domain.replace("session_config:", """  utter_faq/insurance:
  - text: "Parcels are insured up to €500."

session_config:"""))
    domain_line = next(i for i, line in enumerate((project / "domain.yml").read_text().splitlines(), start=1)
                       if line.startswith("  utter_faq/insurance:"))
    # an intent without its response is an error; a response without its intent is skipped, as Rasa warns
    assert errors_of(project, "bot") == [
        "bot/data/more.yml:3: retrieval intent 'faq/gift_cards' has no response utter_faq/gift_cards "
        "(in the domain or a responses file)",
    ]
    (project / "data" / "more.yml").unlink()
    notes = read_any(project, name="bot").notes
    assert f"1 response has no examples (no intent of that name), skipped: utter_faq/insurance " \
           f"(bot/domain.yml:{domain_line})" in notes


def test_rasa_example_errors_point_at_the_example_line(tmp_path):
    path = write(tmp_path / "bot.yml", f"""nlu:
- intent: faq/refund
  examples: |
    - Can I get a refund?

    - {"very " * 250}long question
    - money back
responses:
  utter_faq/refund:
  - text: ""
  - image: https://example.com/refund.png
- broken
""")
    errors = errors_of(path, "bot.yml")
    assert errors == ["bot.yml:12: invalid YAML: expected <block end>, but found '-'"]
    path.write_text(path.read_text().replace("- broken\n", ""))
    assert errors_of(path, "bot.yml") == ["bot.yml:9: response utter_faq/refund has no variant with a text"]
    path.write_text(path.read_text().replace('- text: ""', "- text: Within 30 days, to your card."))
    assert errors_of(path, "bot.yml") == ["bot.yml:6: question is longer than 1000 characters (1263)"]


def test_rasa_intent_without_examples_and_wrong_lines(tmp_path):
    path = write(tmp_path / "nlu.yml", """nlu:
- intent: faq/opening
  examples: |
    - When are you open?
    * on sundays?
- intent: faq/empty
  examples: ""
responses:
  utter_faq/opening:
  - text: Every day 9–18.
  utter_faq/empty:
  - text: Nothing.
""")
    assert errors_of(path, "nlu.yml") == [
        "nlu.yml:5: an example must start with '- ', got '* on sundays?'",
        "nlu.yml:6: retrieval intent 'faq/empty' has no examples",
    ]


# ---------------------------------------------------------------- Dialogflow

def test_dialogflow_csv_is_detected_and_grouped_by_answer():
    path = FIXTURES / "dialogflow-faq.csv"
    assert detect(path) == "dialogflow"
    imported = read_any(path)
    faqs = faqs_of(imported)
    assert imported.format == "dialogflow"
    assert len(faqs) == 10
    pin = faqs[slug_id("How do I reset my Tandem card PIN?", "df-")]
    assert pin["faq_id"] == "df-how-do-i-reset-my-tandem-card-pin-f8d3f626"
    assert pin["questions"] == ["How do I reset my Tandem card PIN?", "I forgot my PIN", "change pin number"]
    assert pin["answer"].endswith('tap "Forgot PIN" and we send it by post within 5 working days.')
    declined = faqs[slug_id("Why was my payment declined?", "df-")]
    assert declined["questions"] == ["Why was my payment declined?", "Why was my card refused at a shop?"]
    # a quoted answer over two lines, with commas
    withdraw = faqs[slug_id("How much can I withdraw per day?", "df-")]
    assert withdraw["answer"] == ("You can withdraw up to €600 a day and €2,000 a month. Your first 4 withdrawals "
                                  "each month are free; after that it's €1 each.\nTo raise your limit for a trip, "
                                  "go to Card > Limits in the app.")
    # the same file gives the same ids
    assert [r.faq_id for r in read_any(path).records] == [r.faq_id for r in imported.records]


def test_dialogflow_header_row_is_tolerated_and_own_csv_is_not_dialogflow(tmp_path):
    path = write(tmp_path / "faq.csv", "\nQuestion,Answer\nDo you ship to Spain?,Yes: 3-5 days.\n"
                                       "shipping to spain,Yes: 3-5 days.\n")
    assert detect(path) == "dialogflow"
    faqs = faqs_of(read_any(path))
    assert list(faqs.values())[0]["questions"] == ["Do you ship to Spain?", "shipping to spain"]
    ours = write(tmp_path / "kb.csv", "faq_id,question\nship,Do you ship to Spain?\n")
    assert detect(ours) == "csv"
    three = write(tmp_path / "three.csv", "faq_id,question,answer\nship,Do you ship?,Yes\n")
    assert detect(three) == "csv"


def test_dialogflow_broken_rows_are_errors_at_their_lines(tmp_path):
    path = write(tmp_path / "faq.csv", 'Can I pay by cheque?,"No, card or transfer only.\nSorry!"\n'
                                       "Do you take Amex?,Yes,but with a 2% fee\n"
                                       "Can I pay later?,\n"
                                       "Can I pay by cheque?,Yes.\n"
                                       '"Is there VAT?,Yes\n')
    assert errors_of(path, "faq.csv") == [
        "faq.csv:3: 3 cells; a Dialogflow FAQ row has 2: question, answer",
        "faq.csv:4: the answer cell is empty",
        f"faq.csv:5: conflicting answer for faq_id {slug_id('Can I pay by cheque?', 'df-')!r} (differs from the "
        "one at faq.csv:1)",
        "faq.csv:6: invalid CSV: a quoted cell is not closed before the end of the file",
    ]


# ---------------------------------------------------------------- FAQ pages (schema.org FAQPage)

def test_faqpage_json_ld_is_detected_and_read():
    path = FIXTURES / "faqpage-jsonld.html"
    assert detect(path) == "faqpage"
    imported = read_any(path)
    faqs = faqs_of(imported)
    assert imported.format == "faqpage"
    assert len(faqs) == 9
    assert all(f["source"] == "https://cafune-coffee.example/help/subscriptions" for f in faqs.values())
    delivery = faqs[slug_id("How much is delivery?")]
    assert delivery["faq_id"] == "how-much-is-delivery-ba107de5"
    assert delivery["answer"] == ("Delivery is free on every subscription in the UK. For one-off orders:\n\n"
                                  "- UK: £3.95, free over £30\n- EU: €9.50 (duties paid)\n"
                                  "- Rest of the world: see shipping rates (https://cafune-coffee.example/shipping)")
    # Yoast-style {"@id": ...} references to Questions elsewhere in the @graph
    grind = faqs[slug_id("Which grind should I choose?")]
    assert grind["answer"] == ("Match it to how you brew:\n\n- Espresso machine: fine\n- Moka pot or AeroPress: "
                               "medium-fine\n- V60, Chemex, filter machine: medium\n- Cafetière (French press): "
                               "coarse\n\nWhole beans keep their flavour longest.")
    # entities decoded, relative links made absolute, <br> a line break
    assert faqs[slug_id("Is your packaging recyclable?")]["answer"] == (
        "Our bags are home-compostable (EN 13432): the valve too. Boxes are 100% recycled cardboard & paper "
        "tape — no plastic at all.")
    assert faqs[slug_id("How do I cancel my subscription?")]["answer"] == (
        "Go to My subscription (https://cafune-coffee.example/account/subscription) and choose Cancel. There is no "
        "minimum term or fee.\nOrders already roasted still ship.")


def test_faqpage_json_ld_and_microdata_of_one_page_are_read_once():
    imported = read_any(FIXTURES / "faqpage-jsonld.html")
    faqs = faqs_of(imported)
    pause = "Can I pause my subscription while I’m on holiday?"
    assert [q for f in faqs.values() for q in f["questions"]].count(pause) == 1
    # the microdata's shorter answer to a JSON-LD question is not taken
    assert faqs[slug_id("When is my coffee roasted and shipped?")]["answer"].endswith(
        "2–4 days after roasting.\n\nYour dispatch email has the tracking link.")
    # a question only the microdata has is read too
    assert faqs[slug_id("Do you ship to Ireland?")]["answer"] == (
        "Yes, with An Post in 3–5 working days. Subscriptions to Ireland pay €4.50 delivery per bag.")
    assert ("2 questions given both as JSON-LD and as microdata: read once, from the JSON-LD (1 with a different "
            "microdata answer)") in imported.notes
    assert "1 suggestedAnswer: not kept (only the accepted answer is)" in imported.notes


def test_faqpage_microdata_is_read():
    path = FIXTURES / "faqpage-microdata.html"
    assert detect(path) == "faqpage"
    faqs = faqs_of(read_any(path))
    assert len(faqs) == 8
    assert all(f["source"] == "https://theatre-cordeliers.example/billetterie/faq" for f in faqs.values())  # og:url
    buy = faqs[slug_id("Comment acheter des billets ?")]
    assert buy["answer"] == ("Trois possibilités :\n\n"
                             "- en ligne sur notre billetterie (https://theatre-cordeliers.example/billetterie), "
                             "24h/24 ;\n- au guichet, du mardi au samedi de 13h à 19h ;\n"
                             "- par téléphone au 04 78 00 12 34 (mêmes horaires).")
    assert buy["questions"] == ["Comment acheter des billets ?"]
    # "billet&nbsp;?": the question's spaces collapsed as the KB stores questions, the id from that
    assert faqs[slug_id("Puis-je échanger ou me faire rembourser un billet ?")]["questions"] == [
        "Puis-je échanger ou me faire rembourser un billet ?"]
    # a <meta itemprop="text" content> is the answer, not the visible paragraph
    assert faqs[slug_id("À quelle heure ouvrent les portes ?")]["answer"] == (
        "Les portes ouvrent 30 minutes avant le début du spectacle. Le placement est libre.")
    # <p> left unclosed, a relative link, a mailto link shown as its text
    assert faqs[slug_id("Peut-on venir avec des enfants ?")]["answer"] == (
        "Chaque spectacle indique un âge conseillé sur sa page.\n\nLes enfants de moins de 3 ans ne sont pas admis, "
        "sauf aux spectacles jeune public (https://theatre-cordeliers.example/saison/jeune-public).")
    assert faqs[slug_id("La salle est-elle accessible en fauteuil roulant ?")]["answer"].endswith(
        "par e-mail à accueil@theatre-cordeliers.example pour que nous vous accueillions.")
    late = faqs[slug_id("Que se passe-t-il si j’arrive en retard ?")]
    assert late["answer"] == ("Par respect pour les artistes, l’accès à la salle peut être refusé après le début.\n"
                              "Quand c’est possible, nous vous plaçons au premier entracte.")


def test_html_to_text():
    assert html_to_text("<p>One &amp; two</p><p>Three<br>four</p>") == "One & two\n\nThree\nfour"
    assert html_to_text('<ol><li>Open <a href="/app">the app</a></li><li>Tap <b>Pay</b></li></ol>',
                        "https://shop.example/faq") == "- Open the app (https://shop.example/app)\n- Tap Pay"
    assert html_to_text('See <a href="#top">above</a> or <a href="https://x.example">https://x.example</a>.') == (
        "See above or https://x.example.")
    assert html_to_text("<div>  lots   of\n  space </div><script>var x = 1;</script>") == "lots of space"


def test_faqpage_is_detected_past_the_first_64_kb(tmp_path):
    page = (FIXTURES / "faqpage-microdata.html").read_text(encoding="utf-8")
    css = "<style>" + "".join(f".c{i} {{ margin: {i % 7}px; }}\n" for i in range(5000)) + "</style>"
    path = write(tmp_path / "big.html", page.replace("</head>", css + "</head>"))
    assert path.read_bytes().find(b"FAQPage") > 65536
    assert detect(path) == "faqpage"
    assert len(faqs_of(read_any(path))) == 8


def test_faqpage_without_faqpage_markup(tmp_path):
    path = write(tmp_path / "about.html", "<html><head><title>About</title></head>\n<body><h1>About us</h1>"
                                          "<p>We roast coffee.</p></body></html>\n")
    with pytest.raises(KbFormatError, match="cannot tell the format"):
        detect(path)  # no "FAQPage" in it: read only when named by --format
    assert errors_of(path, "about.html", "faqpage") == [
        "about.html:1: no schema.org FAQPage (JSON-LD or microdata) in this page"]


def test_faqpage_broken_questions_are_errors_at_their_lines(tmp_path):
    path = write(tmp_path / "faq.html", """<!doctype html>
<html><head>
<script type="application/ld+json">
{"@context": "https://schema.org", "@type": "FAQPage", "mainEntity": [
  {"@type": "Question", "name": "Do you deliver?",
   "acceptedAnswer": {"@type": "Answer", "text": "Yes, across the EU."}},
  {"@type": "Question", "name": "Can I collect in store?"},
  {"@type": "Question", "name": "Is there a warranty?", "acceptedAnswer": {"@type": "Answer", "text": " "}}
]}
</script>
</head>
<body>
<div itemscope itemtype="https://schema.org/FAQPage">
  <div itemprop="mainEntity" itemscope itemtype="https://schema.org/Question">
    <h3 itemprop="name">Do you price-match?</h3>
  </div>
  <div itemprop="mainEntity" itemscope itemtype="https://schema.org/Question">
    <div itemprop="acceptedAnswer" itemscope itemtype="https://schema.org/Answer">
      <p itemprop="text">An answer without its question.</p>
    </div>
  </div>
</div>
</body></html>
""")
    assert detect(path) == "faqpage"
    assert errors_of(path, "faq.html") == [
        "faq.html:7: Question 'Can I collect in store?' has no acceptedAnswer",
        "faq.html:8: Question 'Is there a warranty?': its acceptedAnswer has no text",
        "faq.html:14: Question 'Do you price-match?' has no acceptedAnswer",
        "faq.html:17: a Question without a name (its text)",
    ]


def test_faqpage_invalid_json_ld_is_an_error_at_its_line(tmp_path):
    path = write(tmp_path / "faq.html", """<html><head>
<script type="application/ld+json">{"@type": "Organization", "name": "Broken", }</script>
<script type="application/ld+json">
{"@type": "FAQPage", "mainEntity": [
  {"@type": "Question", "name": "Open on Sundays?", "acceptedAnswer": {"text": "No"}}
  {"@type": "Question", "name": "Open at night?", "acceptedAnswer": {"text": "No"}}
]}
</script></head></html>
""")
    assert errors_of(path, "faq.html") == ["faq.html:6: invalid JSON-LD: Expecting ',' delimiter"]
    # mended, the page reads; the broken script that holds no FAQPage is only noted
    path.write_text(path.read_text().replace('"No"}}\n  {', '"No"}},\n  {'))
    imported = read_any(path)
    assert [r.question for r in imported.records] == ["Open on Sundays?", "Open at night?"]
    assert imported.notes == ["1 JSON-LD script without FAQPage and not valid JSON: skipped"]
