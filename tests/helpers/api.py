"""The served app's shared test setup: the small KB the API tests serve (8 FAQs x 3 phrasings), its settings,
store and Annoy build, and a second KB `shop` beside it (`two_built_kbs`)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from app.settings import Settings
from app.store import FaqStore, KbRecord
from index.artifacts import BuildRegistry
from app.release import build_current


# A small KB: 8 FAQs x 3 paraphrases (variants of one FAQ crowd the top, which grouping must handle).
KB = {
    "reset_password": ("Use the 'Forgot password' link on the sign-in page.",
                       ["How do I reset my password?", "I forgot my password", "I can't log in, I need a new password"]),
    "cancel_order": ("Open Orders and press Cancel before the order ships.",
                     ["How can I cancel my order?", "I want to cancel a purchase", "Stop my order from being shipped"]),
    "shipping_time": ("Standard shipping takes 3 to 5 business days.",
                      ["How long does shipping take?", "When will my package arrive?", "What is the delivery time?"]),
    "refund": ("Refunds are paid to the original payment method within 10 days.",
               ["How do I get a refund?", "I want my money back", "What is your refund policy?"]),
    "change_email": ("Go to Settings > Account and edit the email field.",
                     ["How do I change my email address?", "Update the email on my account", "I have a new email address"]),
    "opening_hours": ("We are open 9:00-18:00, Monday to Saturday.",
                      ["What are your opening hours?", "When is the store open?", "Are you open on Sunday?"]),
    "payment_methods": ("We accept cards, PayPal and bank transfer.",
                        ["Which payment methods do you accept?", "Can I pay with PayPal?", "Do you take credit cards?"]),
    "delete_account": ("Settings > Privacy > Delete account removes all your data.",
                       ["How do I delete my account?", "Close my account permanently", "Remove all my personal data"]),
}


def kb_records(kb: dict = KB) -> list[KbRecord]:
    return [KbRecord(faq_id, q, answer if i == 0 else None, [] if i == 0 else None)
            for faq_id, (answer, questions) in kb.items() for i, q in enumerate(questions)]


def make_settings(data_dir: Path, **overrides) -> Settings:
    values = dict(data_dir=data_dir, encoder="minilm", torch_threads=1, encode_workers=1, kb_poll_seconds=0,
                  admin_token=None, query_log=True)
    values.update(overrides)
    return Settings(**values)


def make_store(settings: Settings, records: list[KbRecord] | None = None) -> FaqStore:
    from migrations.runner import migrated_store

    store = migrated_store(settings)
    store.import_records(records if records is not None else kb_records())
    return store


def build(store: FaqStore, encoder, settings: Settings) -> dict:
    return build_current(store, encoder, BuildRegistry(settings.index_dir), n_trees=5)


SHOP = {
    "pets": ("Dogs on a leash are welcome in every store.", ["Can I bring my dog?", "Are pets allowed inside?"]),
    "parking": ("Free parking is behind the store.", ["Where can I park?", "Is there a car park?"]),
    "wifi": ("The guest wifi is called Shop-Guest, no password.", ["Is there free wifi?", "wifi password"]),
}


def shop_records(faqs: dict = SHOP) -> list[KbRecord]:
    return [KbRecord(faq_id, q, answer) for faq_id, (answer, questions) in faqs.items() for q in questions]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def two_built_kbs(data_dir, encoder, admin_token: str):
    """(settings, store): the default KB (KB above) and KB `shop`, both built."""
    settings = make_settings(data_dir, admin_token=admin_token)
    store = make_store(settings)
    build(store, encoder, settings)
    store.catalog.create("shop")
    shop = store.for_kb("shop")
    shop.import_records(shop_records())
    build(shop, encoder, settings.for_kb("shop"))
    return settings, store


@contextmanager
def serving(data_dir: Path, encoder, records: list[KbRecord], admin_token: str | None = None, **overrides):
    """(client, store, settings): `records` stored and built in `data_dir`, served in process with the
    settings' `overrides`."""
    from fastapi.testclient import TestClient

    from app.api.main import create_app

    settings = make_settings(data_dir, admin_token=admin_token, **overrides)
    store = make_store(settings, records)
    build(store, encoder, settings)
    with TestClient(create_app(settings, store=store, encoder=encoder)) as client:
        yield client, store, settings

