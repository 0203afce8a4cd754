"""The two KBs the QnA Maker and Azure route tests serve, imported from the realistic export fixtures as a
migrating bot's owner would: `gym` from the Azure project JSON (with its synonyms and default answer, as
`faq kb import` keeps them) and `bikes` from the QnA Maker TSV."""
from __future__ import annotations

from pathlib import Path

from app.curation.imports import keep_beside
from kb.formats import read_any
from tests.helpers.api import build, make_settings, make_store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
KBS = (("gym", "azure-project.json"), ("bikes", "qnamaker-export.tsv"))


def imported_kbs(data_dir: Path, encoder, admin_token: str):
    """(settings, store, read keys by KB): both KBs imported and built in `data_dir`."""
    settings = make_settings(data_dir, admin_token=admin_token)
    store = make_store(settings)
    keys = {}
    for kb, name in KBS:
        imported = read_any(FIXTURES / name)
        store.catalog.create(kb)
        scoped = store.for_kb(kb)
        scoped.import_records(imported.records)
        keep_beside(scoped, kb, imported, sync=False, dry_run=False)
        build(scoped, encoder, settings.for_kb(kb, store.catalog.settings(kb)))
        keys[kb] = store.catalog.issue_token(kb, "read")[1]
    return settings, store, keys
