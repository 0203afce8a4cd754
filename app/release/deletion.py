"""Deleting a KB completely (`faq kb delete`): its store rows, its folder under `<data_dir>/kbs/`, and the
Elasticsearch indexes of its builds, vector indexes and BM25 ones. The store rows go first: once they are gone
the KB is gone for every server, and what is left behind on disk or in Elasticsearch is only space.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class KbDeletion:
    """What `delete_kb` removed, and what it could not."""

    counts: dict[str, int]
    folder: Path
    removed_folder: bool
    #: versions whose vector index was deleted (FAQ_VECTOR_STORE=elasticsearch)
    vector_versions: list[str] = field(default_factory=list)
    #: why the vector indexes could not be deleted (then they are all left)
    vector_error: Exception | None = None
    lexical_deleted: list[str] = field(default_factory=list)
    lexical_left: list[str] = field(default_factory=list)


def folder_problem(settings: Any) -> str | None:
    """Why the KB's folder must not be removed (never the data dir itself, whatever a future kb_dir rule
    says), or None."""
    folder = settings.kb_dir
    if folder.resolve() == settings.data_dir.resolve() or folder.parent.parent != settings.data_dir:
        return f"its folder {folder} is not under {settings.data_dir / 'kbs'}"
    return None


def lexical_index_names(registry: Any) -> list[str]:
    """The Elasticsearch BM25 indexes the KB's builds name in their manifests (the prefix may have changed
    since they were built)."""
    names = []
    for version in registry.versions():
        try:
            manifest = registry.read_manifest(version)
        except (OSError, ValueError, LookupError):  # a folder half gone must not stop the deletion
            continue
        name = ((manifest.get("lexical") or {}).get("elasticsearch") or {}).get("index")
        if name:
            names.append(name)
    return names


def delete_kb(settings: Any, store: Any, name: str) -> KbDeletion:
    """Delete KB `name` (`settings` are its own, `store` any scope of the database). Raises KbNotFound, and
    ValueError for the default KB."""
    from index.artifacts import BuildRegistry

    registry = BuildRegistry(settings.index_dir)
    es_names = lexical_index_names(registry) if settings.es_url and registry.index_dir.is_dir() else []
    counts = store.catalog.delete(name)
    folder = settings.kb_dir
    done = KbDeletion(counts, folder, folder.is_dir())
    shutil.rmtree(folder, ignore_errors=True)
    if settings.es_url and settings.vector_store == "elasticsearch":
        from index.elasticsearch.vectors import delete_kb_vectors

        try:
            done.vector_versions = delete_kb_vectors(settings.es_url, settings.es_index_prefix, name)
        except Exception as exc:  # noqa: BLE001 - the KB is deleted; the caller says what is left behind
            done.vector_error = exc
    if es_names:
        from index.elasticsearch.lexical import delete_es_indexes

        done.lexical_deleted = delete_es_indexes(settings.es_url, es_names)
        done.lexical_left = [n for n in es_names if n not in done.lexical_deleted]
    return done
