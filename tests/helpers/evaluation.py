"""A tiny KB with queries for the evaluation runners."""
from __future__ import annotations

import json


def write_tiny_kb_and_queries(tmp_path):
    """(kb.jsonl, q.jsonl): 3 FAQs / 4 phrasings and 4 queries, one out of scope (also the dev split)."""
    kb = tmp_path / "kb.jsonl"
    kb.write_text("\n".join(json.dumps(r) for r in [
        {"faq_id": "password", "question": "how do i reset my password", "answer": "Use the link."},
        {"faq_id": "password", "question": "i forgot my password"},
        {"faq_id": "hours", "question": "when are you open", "answer": "9 to 5."},
        {"faq_id": "refund", "question": "i want a refund", "answer": "5 days."},
    ]) + "\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text("\n".join(json.dumps(r) for r in [
        {"query": "password reset", "faq_id": "password"},
        {"query": "opening hours", "faq_id": "hours"},
        {"query": "money back", "faq_id": "refund"},
        {"query": "capital of peru", "faq_id": None},
    ]) + "\n")
    return kb, queries
