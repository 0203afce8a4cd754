"""A query's place in a conversation: its previous turn (turns.py) and small talk (small_talk/)."""
