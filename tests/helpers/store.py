"""Records of the store tests: 3 FAQs, 5 phrasings, tags and an FAQ without tags."""
from __future__ import annotations

from kb.records import KbRecord


KB = [
    KbRecord("reset", "How do I reset my password?", "Use the reset link.", ["account"]),
    KbRecord("reset", "I forgot my password"),
    KbRecord("refund", "Can I get a refund?", "Within 30 days.", ["billing", "orders"]),
    KbRecord("refund", "How do I get my money back?"),
    KbRecord("hours", "When are you open?", "9 to 5, Monday to Friday.", None),
]
