"""Index build records (`index_builds`) of one KB: what `faq index build` writes as it goes, what the sweep of
killed builds marks failed, and what `faq index list` and the KB stats show."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Row, insert, select, update

from app.db.models import utcnow
from app.store.base import StorePart, builds_t, utc

_BUILD_FIELDS = frozenset(c.name for c in builds_t.columns) - {"id", "kb"}


def build_dict(row: Row, iso: bool = False) -> dict[str, Any]:
    """An index_builds row as a dict, timestamps as aware UTC datetimes (ISO strings with `iso`)."""
    out = dict(row._mapping)
    for key in ("started_at", "finished_at"):
        out[key] = utc(out[key])
        if iso and out[key] is not None:
            out[key] = out[key].isoformat()
    return out


class BuildStore(StorePart):
    def _check_build_fields(self, fields: dict[str, Any]) -> None:
        unknown = set(fields) - _BUILD_FIELDS
        if unknown:
            raise ValueError(f"unknown index build field(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(_BUILD_FIELDS))}")

    def record_build(self, **fields: Any) -> None:
        """Insert an index_builds row; needs version and encoder_id (status defaults to "building")."""
        self._check_build_fields(fields)
        missing = [f for f in ("version", "encoder_id") if fields.get(f) is None]
        if missing:
            raise ValueError(f"record_build needs {', '.join(missing)}")
        fields.setdefault("status", "building")
        fields.setdefault("started_at", utcnow())
        with self.engine.begin() as conn:
            conn.execute(insert(builds_t).values(kb=self.kb, **fields))

    def update_build(self, version: str, **fields: Any) -> None:
        """Update the build `version`; raises KeyError when there is none."""
        self._check_build_fields(fields)
        if not fields:
            return
        with self.engine.begin() as conn:
            if conn.execute(update(builds_t).where(builds_t.c.kb == self.kb, builds_t.c.version == version)
                            .values(**fields)).rowcount == 0:
                raise KeyError(f"no index build with version {version!r}")

    def list_builds(self, status: str | None = None) -> list[dict[str, Any]]:
        """All index builds (or those with `status`), newest first (timestamps as aware UTC datetimes)."""
        stmt = select(builds_t).where(builds_t.c.kb == self.kb).order_by(builds_t.c.id.desc())
        if status is not None:
            stmt = stmt.where(builds_t.c.status == status)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [build_dict(r) for r in rows]

    def fail_build_if_building(self, version: str, error: str) -> bool:
        """Mark the build `version` failed with `error`, only if it is still "building" (a sweep must not
        overwrite the outcome of a build that finished meanwhile); True if it was changed."""
        with self.engine.begin() as conn:
            result = conn.execute(
                update(builds_t).where(builds_t.c.kb == self.kb, builds_t.c.version == version,
                                       builds_t.c.status == "building")
                .values(status="failed", finished_at=utcnow(), error=error[:2000])
            )
            return result.rowcount > 0
