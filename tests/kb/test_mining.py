"""kb/mining.py: the bag-of-words key, phrasing proposals and unanswered clusters (no store)."""
from __future__ import annotations

from kb.mining import (EVIDENCE_FEEDBACK_CORRECT, EVIDENCE_FEEDBACK_FAQ_ID, EVIDENCE_KEY, LoggedQuery, MiningStats,
                       bow_key, cluster_unanswered, mine_phrasings, phrasing_form)

KB = {"reset-password": ["How do I reset my password?", "I forgot my password"],
      "refund": ["Can I get a refund?", "How do refunds work?"]}


def test_key_drops_stop_words_and_numbers_keeps_negations_ignores_order():
    assert bow_key("How do I reset my password?") == "password reset"
    assert bow_key("password reset, how?") == bow_key("How do I reset my password?")
    assert bow_key("Reset my password 2 times in 2024") == "password reset times"
    assert bow_key("I can't reset my password") == "not password reset"
    assert bow_key("I cannot reset my password") == "cannot password reset"
    assert bow_key("do not reset my password") != bow_key("do reset my password")
    assert bow_key("what is the 3rd one") == "one"
    assert bow_key("the 42") == ""


def test_phrasing_form_ignores_case_spacing_and_end_punctuation():
    assert phrasing_form("  How do I RESET my\n password? ") == phrasing_form("how do i reset my password")


def _q(query, faq_id, score, correct=None, fb=None):
    return LoggedQuery(query, faq_id, score, correct, fb)


def test_proposes_only_confident_and_key_agreeing_queries():
    log = [_q("password reset how", "reset-password", 0.9),
           _q("Password reset how?", "reset-password", 0.8),      # same phrasing: counted, not repeated
           _q("reset password please", "reset-password", 0.3),    # key agrees, score too low
           _q("change my password", "reset-password", 0.95),     # confident, key disagrees
           _q("how do i reset my password", "reset-password", 0.99)]  # already a phrasing
    stats = MiningStats()
    props = mine_phrasings(log, KB, min_score=0.5, stats=stats)
    assert [(p.faq_id, p.question, p.count) for p in props] == [("reset-password", "password reset how", 2)]
    assert props[0].evidence == {EVIDENCE_KEY: 2}
    assert props[0].matched_phrasing == "How do I reset my password?"
    assert stats.already_phrasing == 1 and stats.logged == 5


def test_a_pair_scorer_confirms_confident_matches_the_key_does_not():
    """The Siamese matcher as the second opinion: asked once, in one batch, only about confident matches
    whose key differs; its probability must reach min_agree."""
    asked = []

    def agree(pairs):
        asked.append(list(pairs))
        return [0.95 if q == "change my password" else 0.5 for q, _ in pairs]

    log = [_q("password reset how", "reset-password", 0.9),     # the key settles it: not asked
           _q("change my password", "reset-password", 0.95),    # agreed
           _q("change my password", "reset-password", 0.97),
           _q("password gone", "reset-password", 0.95),         # the matcher says 0.5: no
           _q("new password", "reset-password", 0.3)]           # not confident: not asked
    props = mine_phrasings(log, KB, min_score=0.5, agree=agree, min_agree=0.9)
    assert asked == [[("change my password", "reset-password"), ("password gone", "reset-password")]]
    assert {(p.question, p.count, tuple(p.evidence.items())) for p in props} == {
        ("password reset how", 1, (("key", 1),)), ("change my password", 2, (("siamese", 2),))}
    assert [p.question for p in mine_phrasings(log, KB, min_score=0.5, agree=agree, min_agree=0.96)] == [
        "password reset how"]


def test_feedback_confirms_and_vetoes():
    log = [_q("money back for my order", "refund", 0.4, correct=True),       # confirmed despite low score
           _q("lost my login secret", None, 0.2, fb="reset-password"),     # user named the FAQ
           _q("refund how", "refund", 0.9),
           _q("refund how", "refund", 0.9, correct=False),                 # user said wrong: veto
           _q("get refund", "refund", 0.9, fb="nonexistent")]             # unknown FAQ: no proposal
    props = {p.question: p for p in mine_phrasings(log, KB, min_score=0.5)}
    assert set(props) == {"money back for my order", "lost my login secret", "get refund"}
    assert props["money back for my order"].evidence == {EVIDENCE_FEEDBACK_CORRECT: 1}
    assert props["lost my login secret"].faq_id == "reset-password"
    assert props["lost my login secret"].evidence == {EVIDENCE_FEEDBACK_FAQ_ID: 1}
    assert props["get refund"].evidence == {EVIDENCE_KEY: 1}  # "get" is a content word; "can i" are not


def test_no_proposal_for_another_faqs_phrasing_or_conflict():
    log = [_q("I forgot my password", "refund", 0.9, correct=True),       # is reset-password's phrasing
           _q("refund", "refund", 0.9, correct=True), _q("refund", "reset-password", 0.9, correct=True)]
    stats = MiningStats()
    assert mine_phrasings(log, KB, min_score=0.5, stats=stats) == []
    assert stats.phrasing_of_other_faq == 1 and stats.conflicting == 2


def test_unanswered_clusters_biggest_first():
    log = [_q("Where is the cafeteria?", None, 0.2), _q("cafeteria where", None, 0.1),
           _q("where's the cafeteria", None, 0.3),
           _q("parking spots", None, 0.2), _q("parking spots", None, 0.2),
           _q("what is the weather", None, 0.1),                               # alone: no cluster
           _q("refund how", "refund", 0.9),                                    # answered
           _q("refund?", "refund", 0.55), _q("refund!", "refund", 0.52),         # answered but low
           _q("cafeteria where", None, 0.1, fb="refund")]                      # feedback named an FAQ
    clusters = cluster_unanswered(log)
    assert [(c.key, c.size, len(c.queries)) for c in clusters] == [("cafeteria", 3, 3), ("parking spots", 2, 1)]
    low = cluster_unanswered(log, low_score=0.6)
    assert ("refund", 2) in [(c.key, c.size) for c in low]


def test_clusters_merge_by_cosine():
    import numpy as np

    log = [_q("cafeteria where", None, 0.1), _q("cafeteria where", None, 0.1),
           _q("canteen location", None, 0.1), _q("parking spots", None, 0.1)]
    vectors = {"cafeteria where": [1.0, 0.0], "canteen location": [0.96, 0.28], "parking spots": [0.0, 1.0]}
    embed = lambda texts: np.array([vectors[t] for t in texts])  # noqa: E731
    merged = cluster_unanswered(log, embed=embed, cosine=0.9, min_size=1)
    assert [(c.size, sorted(c.queries)) for c in merged] == [
        (3, ["cafeteria where", "canteen location"]), (1, ["parking spots"])]
