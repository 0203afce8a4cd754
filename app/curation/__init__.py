"""Curating a KB from what users ask: the review queues, mining the query log, what an import keeps beside its FAQs."""
