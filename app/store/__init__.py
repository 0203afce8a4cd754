"""The database behind the service, the CLI and the index builder: `FaqStore` (app/store/facade.py)
and one module per concern it is made of (`kb`, `builds`, `query_log`, `reviews`, `kbs`, sharing `base`).
Contract: docs/architecture.md ("Store")."""
from app.store.base import KbNotFound, SchemaNotReady
from app.store.facade import FaqStore
from app.store.faqs import FaqExists, FaqNotFound, FaqOut, ImportReport, KbRecord, KbSnapshot, KbValidationError, VariantRow
from app.store.catalog import TOKEN_KINDS, KbCatalog, KbExists, KbInfo, TokenInfo
from app.store.query_log import PRUNE_CHUNK, FeedbackAlreadyRecorded, FeedbackSessionMismatch, PruneResult
from app.store.reviews import MAX_REASON_CHARS, QUEUES, Dismissal

__all__ = [
    "Dismissal", "FaqExists", "FaqNotFound", "FaqOut", "FaqStore", "FeedbackAlreadyRecorded", "FeedbackSessionMismatch",
    "ImportReport", "KbCatalog", "KbExists", "KbInfo", "KbNotFound", "KbRecord", "KbSnapshot", "KbValidationError", "MAX_REASON_CHARS", "PRUNE_CHUNK", "PruneResult", "QUEUES", "SchemaNotReady",
    "TOKEN_KINDS", "TokenInfo", "VariantRow",
]
