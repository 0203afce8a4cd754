"""KB data for tests: INDEX_TEST_FAQS (30 FAQs) and a KB file writer."""
from __future__ import annotations

import json


#: a small KB: 30 FAQs with 2-3 phrasings each (faq_id, answer, questions)
INDEX_TEST_FAQS = [
    ("reset-password", "Use 'Forgot password' on the sign-in page.", ["How do I reset my password?", "I forgot my password, what now?", "Can I change a lost password?"]),
    ("change-email", "Go to Settings > Account > Email.", ["How can I change my email address?", "Update the e-mail on my account"]),
    ("delete-account", "Settings > Privacy > Delete account.", ["How do I delete my account?", "I want to close my account permanently", "Remove my profile and data"]),
    ("refund", "Refunds are issued within 14 days of purchase.", ["Can I get a refund?", "How do I ask for my money back?"]),
    ("shipping-time", "Standard shipping takes 3-5 business days.", ["How long does shipping take?", "When will my order arrive?", "Delivery time for orders"]),
    ("track-order", "Use the tracking link in your confirmation email.", ["How can I track my order?", "Where is my package right now?"]),
    ("cancel-order", "Orders can be cancelled until they ship.", ["How do I cancel my order?", "Can I cancel a purchase I just made?"]),
    ("payment-methods", "We accept cards, PayPal and bank transfer.", ["Which payment methods do you accept?", "Can I pay with PayPal?", "Do you take credit cards?"]),
    ("invoice", "Invoices are under Orders > Invoice.", ["Where can I download my invoice?", "I need a receipt for my purchase"]),
    ("opening-hours", "Support is available 9am-5pm, Monday to Friday.", ["What are your opening hours?", "When is customer support available?"]),
    ("contact-support", "Write to support@example.com.", ["How do I contact customer service?", "Is there a support email address?", "How can I talk to a human?"]),
    ("two-factor", "Enable 2FA under Settings > Security.", ["How do I turn on two-factor authentication?", "Enable 2FA on my account"]),
    ("change-username", "Usernames can be changed once a month.", ["Can I change my username?", "How do I pick a new user name?"]),
    ("subscription-cancel", "Cancel any time under Billing > Subscription.", ["How do I cancel my subscription?", "Stop my monthly plan", "End my membership renewal"]),
    ("subscription-upgrade", "Choose a plan under Billing > Plans.", ["How do I upgrade my plan?", "Switch to the premium subscription"]),
    ("student-discount", "Students get 50% off with a valid student email.", ["Do you offer a student discount?", "Is there a cheaper price for students?"]),
    ("gift-card", "Gift cards are redeemed at checkout.", ["How do I redeem a gift card?", "Where do I enter my gift voucher code?"]),
    ("international-shipping", "We ship to 40 countries.", ["Do you ship internationally?", "Can I order from outside the country?", "Do you deliver abroad?"]),
    ("return-item", "Returns are free within 30 days.", ["How do I return an item?", "Can I send back a product I don't like?"]),
    ("damaged-item", "Send us a photo and we replace it.", ["My item arrived broken", "What if the product is damaged on arrival?"]),
    ("app-download", "The app is on the App Store and Google Play.", ["Is there a mobile app?", "Where can I download the app for my phone?"]),
    ("data-export", "Settings > Privacy > Export data.", ["How can I export my data?", "Download a copy of all my information"]),
    ("language", "Change the language under Settings > Language.", ["How do I change the language?", "Can I use the site in Spanish?"]),
    ("dark-mode", "Toggle dark mode under Settings > Appearance.", ["Is there a dark mode?", "How do I switch to a dark theme?"]),
    ("notifications", "Manage notifications under Settings > Notifications.", ["How do I turn off notifications?", "Stop sending me push alerts"]),
    ("newsletter", "Use the unsubscribe link in any newsletter.", ["How do I unsubscribe from the newsletter?", "Stop marketing emails"]),
    ("price-match", "We match prices of major retailers.", ["Do you price match?", "Will you match a lower price from another shop?"]),
    ("warranty", "All products carry a two year warranty.", ["How long is the warranty?", "Is my product still under guarantee?"]),
    ("store-locations", "See the store finder on our website.", ["Where are your physical stores?", "Is there a shop near me?"]),
    ("account-locked", "Accounts unlock automatically after 30 minutes.", ["My account is locked", "Why can't I log in after several attempts?", "Too many login attempts, what now?"]),
]


def write_kb_jsonl(path, faqs: dict[str, list[str]]):
    """A KB file in the exchange format: one line per phrasing, answer "about <faq_id>"."""
    with open(path, "w") as fh:
        for faq_id, questions in faqs.items():
            for q in questions:
                fh.write(json.dumps({"faq_id": faq_id, "question": q, "answer": f"about {faq_id}"}) + "\n")
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """`faq ARGV` in this process: (exit code, stdout, stderr)."""
    from cli.main import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def export_round_trip(db_url: str, kb_file: str, export, capsys):
    """`faq kb import KB_FILE`, `faq kb export EXPORT`, the export imported back with --sync (asserted to change
    nothing) and into a second KB "copy": -> (the original KB's snapshot, the copy's)."""
    from app.store import FaqStore

    assert run_cli(capsys, "kb", "import", kb_file)[0] == 0
    assert run_cli(capsys, "kb", "export", str(export))[0] == 0
    code, out, _ = run_cli(capsys, "kb", "import", str(export), "--sync", "--json")
    assert code == 0 and json.loads(out)["changes"] == 0
    code, _, err = run_cli(capsys, "kb", "import", str(export), "--kb", "copy")
    assert code == 0, err
    with FaqStore(db_url) as store:
        return store.snapshot(), store.for_kb("copy").snapshot()
