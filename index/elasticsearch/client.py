"""What both Elasticsearch uses (the BM25 engine of `lexical.py`, the vector store of `vectors.py`) share: the
client major this code speaks, one client configuration, and URLs fit to show."""
from __future__ import annotations

import re
from typing import Any

#: client major version this code talks to (pyproject pins elasticsearch>=8.19,<9)
ES_MAJOR = 8


def redact(url: str) -> str:
    """A URL without its credentials (for messages and manifests)."""
    return re.sub(r"//[^/@]*@", "//***@", url)


def where(url: str) -> str:
    """How messages name the server: without the credentials its URL may carry."""
    return f"Elasticsearch at {redact(url)}"


def new_client(url: str, timeout_s: float) -> Any:
    """A client without retries: a request that cannot be answered must fail fast, not stall the one
    behind it."""
    from elasticsearch import Elasticsearch

    return Elasticsearch(url, request_timeout=timeout_s, max_retries=0, retry_on_timeout=False)
