"""Toy KBs of the MSEM training tests: FAQS (6 FAQs x 4 phrasings), WIDE (12 x 4) with labelled
user queries, and a query file writer."""
from __future__ import annotations

import json


FAQS = {
    "password": ["how do i reset my password", "i forgot my password", "password reset please", "change my password"],
    "hours": ["when are you open", "what are your opening hours", "opening times today", "are you open on sunday"],
    "shipping": ["how much is shipping", "shipping cost to france", "what does delivery cost", "is shipping free"],
    "refund": ["i want a refund", "how do i get my money back", "refund my order", "can i return this for a refund"],
    "delete": ["delete my account", "how can i close my account", "remove my account forever", "account deletion"],
    "address": ["change my address", "i moved to a new address", "update delivery address", "new home address"],
}


# 12 FAQs x 4 phrasings: enough multi-phrasing FAQs to train on, and one held out of each (measured for
# information: only --dev queries decide)
WIDE = {**FAQS,
        "invoice": ["where is my invoice", "download an invoice", "i need a receipt for my order", "send me the bill"],
        "track": ["where is my parcel", "track my order", "my package has not arrived", "delivery status"],
        "language": ["change the language", "switch the app to spanish", "set the language to german", "wrong language"],
        "coupon": ["my discount code does not work", "apply a coupon", "promo code rejected", "use a voucher"],
        "email": ["change my email address", "update the email on my account", "new email for login", "switch email"],
        "cancel": ["cancel my order", "i ordered by mistake", "stop my order before it ships", "undo my purchase"]}


#: labelled user queries for WIDE, worded as users write rather than as the KB does (a --dev file)
WIDE_USER_QUERIES = [
    ("cant log in, need a new password", "password"), ("is the shop open tomorrow morning", "hours"),
    ("do you charge for delivery", "shipping"), ("money back for a broken kettle", "refund"),
    ("get rid of my account", "delete"), ("i relocated, where do you send stuff now", "address"),
    ("can i get a receipt", "invoice"), ("wheres my package right now", "track"),
    ("the app shows french", "language"), ("voucher code not accepted", "coupon"),
    ("use another email to log in", "email"), ("please cancel what i just bought", "cancel"),
]


def write_queries(path, rows):
    """A query file: (query, faq_id) rows as JSONL {query, faq_id}."""
    path.write_text("".join(json.dumps({"query": q, "faq_id": f}) + "\n" for q, f in rows))
    return path
