"""`Retriever`: variant-level nearest-neighbour search over one index version plus the KB changes
made since it was built.

A build is immutable, but the KB is edited live through the admin API. `with_kb(snapshot, ...)`
diffs the build's id map against the current KB snapshot:
- variants whose (variant_id, question, faq_id) is not in the build go into a *delta segment*
  (their vectors, searched exactly; it stays small between rebuilds);
- build variants that were deleted or changed become *tombstones*, filtered out of Annoy's results;
- answers (when the build uses answer evidence, index/answers.py): new or edited ones are encoded,
  deleted FAQs' dropped, so `answer_vectors` always describes the live KB.
So adds, edits and deletes are matchable immediately; the next build folds them in (delta empty).

A Retriever never changes after construction (hot swap replaces the whole object), which makes it
safe to share between threads: Annoy's get_nns_by_vector only reads the mmapped forest and the
numpy parts are read-only.
"""
from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, MutableMapping

import numpy as np

from index import artifacts
from index.ann import AnnIndex
from index.answers import AnswerVectors
from index.selection import Selection, resolve
from kb.records import is_placeholder


@dataclass(frozen=True)
class Hit:
    variant_id: int
    faq_id: str
    question: str
    cosine: float


#: Builds with at most this many vector cells (items x dim; 16M = 64 MB of fp32, e.g. 40k MiniLM or 20k
#: mpnet phrasings) are searched exactly by one matrix product instead of through Annoy: at that size
#: the product costs about a millisecond per query, less than Annoy at the search_k that recall@10 >= 0.99
#: needs, and its recall is 1 (bench/ann_params.py, docs/results.md).
EXACT_MAX_CELLS = 16_000_000
#: an Annoy build scores a filter's phrasings exactly from their stored vectors when they hold at most this
#: many cells (16 MB of fp32: 5k mpnet phrasings), keeping the vectors of SELECTED_VECTOR_SETS filters at
#: once; a larger selection is searched through Annoy, asked deeper until enough of it comes back
SELECTED_MAX_CELLS = 4_000_000
SELECTED_VECTOR_SETS = 4


class Retriever:
    """Annoy (one build) + delta segment + tombstones. Build with `load`, refresh with `with_kb`."""

    def __init__(
        self,
        build_dir: Path,
        manifest: dict,
        ann: AnnIndex,
        ids: np.ndarray,
        faq_ids: list[str],
        questions: list[str],
        item_of: dict[int, int] | None = None,
        tombstones: np.ndarray | None = None,
        delta_vecs: np.ndarray | None = None,
        delta_rows: list[tuple[int, str, str]] | None = None,
        answers: dict[str, tuple[str, list[str]]] | None = None,
        kb_revision: int | None = None,
        details: dict[str, Any] | None = None,
        answer_vectors: AnswerVectors | None = None,
        exact: np.ndarray | None = None,
        backend: Any = None,
    ):
        self.build_dir = Path(build_dir)
        self.manifest = manifest
        self.version: str = manifest["version"]
        self.dim: int = int(manifest["dim"])
        self.search_k: int = int(manifest.get("search_k", -1))
        self._ann = ann
        self._ids = ids  # annoy item -> variant_id
        self._faq_ids = faq_ids
        self._questions = questions
        # variant_id -> annoy item; built once per build and shared by every with_kb() copy
        self._item_of = item_of if item_of is not None else {int(v): i for i, v in enumerate(ids.tolist())}
        self._tombstones = tombstones if tombstones is not None else np.zeros(len(ids), dtype=bool)
        self._n_tombstones = int(self._tombstones.sum())
        self._delta_vecs = delta_vecs if delta_vecs is not None else np.zeros((0, self.dim), dtype=np.float32)
        self._delta_rows = delta_rows or []  # (variant_id, faq_id, question) per delta row
        #: faq_id -> (answer, tags) from the latest snapshot (empty until with_kb is called)
        self.answers: dict[str, tuple[str, list[str]]] = answers or {}
        #: faq_id -> its metadata, source, follow-ups and context_only (kb.records.FaqDetails) from the same
        #: snapshot, for the responses; FAQs not in it have none
        self.details: dict[str, Any] = details or {}
        #: the answer segment (index/answers.py); None when the build uses no answer evidence
        self.answer_vectors = answer_vectors
        #: the build's vectors (fp32, as Annoy holds them) when the build is small enough to search exactly
        #: (EXACT_MAX_CELLS); shared by every with_kb() copy
        self._exact = exact
        #: where the build's phrasings are searched when not in process: an object with
        #: `search(vecs, want, exclude) -> [(variant_ids, vectors)]` (index/elasticsearch/vectors.py EsPhrasingSearch)
        self._backend = backend
        # per thread, the last call's score rows by query bytes: `deepen` re-searches the same queries
        # deeper (a FAQ with 100 phrasings fills the first depth), and the product is most of the cost
        self._recent = threading.local()
        #: KB revision this retriever reflects (the build's until with_kb is called)
        self.kb_revision: int | None = kb_revision if kb_revision is not None else manifest.get("kb_revision")

    # --- construction -----------------------------------------------------------------------------
    @classmethod
    def load(cls, build_dir: str | Path, mmap: bool = True, backend: Any = None) -> "Retriever":
        """Open a finished build folder (or the `current` symlink). The Annoy file is memory-mapped,
        so processes serving the same version share its pages. With a `backend` the build's phrasings are
        searched there (the Annoy file still answers `vectors_of`), so no in-process copy is made."""
        build_dir = Path(build_dir).resolve()  # resolve `current` once: later switches don't affect us
        manifest_path = build_dir / artifacts.MANIFEST_FILE
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{build_dir}: not an index build (no {artifacts.MANIFEST_FILE}); run `faq index build`")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        ann = AnnIndex.load(build_dir / artifacts.ANNOY_FILE, int(manifest["dim"]), mmap=mmap)
        ids = np.load(build_dir / artifacts.IDS_FILE)
        faq_ids: list[str] = []
        questions: list[str] = []
        with open(build_dir / artifacts.IDMAP_FILE, encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, 1):
                row = json.loads(line)
                if row["variant_id"] != int(ids[line_no - 1]):
                    raise ValueError(f"{build_dir / artifacts.IDMAP_FILE}:{line_no}: variant_id does not match {artifacts.IDS_FILE}")
                faq_ids.append(row["faq_id"])
                questions.append(row["question"])
        if not (len(ids) == len(faq_ids) == ann.n_items):
            raise ValueError(f"{build_dir}: {len(ids)} ids, {len(faq_ids)} idmap rows, {ann.n_items} annoy items differ")
        small = backend is None and ann.n_items * ann.dim <= EXACT_MAX_CELLS
        exact = ann.item_vectors(list(range(ann.n_items))) if small else None
        return cls(build_dir, manifest, ann, ids, faq_ids, questions, answer_vectors=_load_answers(build_dir, manifest),
                   exact=exact, backend=backend)

    def as_built(self) -> "Retriever":
        """This build alone, as it matched when it was made: no delta segment, its own FAQs with the answers it
        encoded (FAQs without one answer with ""). What `faq index build` compares builds on."""
        av = self.answer_vectors
        texts = dict(zip(av.faq_ids, av.texts)) if av is not None and av.texts is not None else {}
        return Retriever(self.build_dir, self.manifest, self._ann, self._ids, self._faq_ids, self._questions,
                         item_of=self._item_of, answers={f: (texts.get(f, ""), []) for f in set(self._faq_ids)},
                         answer_vectors=av, exact=self._exact, backend=self._backend)

    def with_kb(self, snapshot: Any, encoder: Any, cache: MutableMapping[str, np.ndarray] | None = None) -> "Retriever":
        """A new Retriever reflecting `snapshot` (a KbSnapshot): delta segment + tombstones + answers.

        `cache` (text -> vector), when given, is reused across refreshes so unchanged delta questions
        are not re-encoded every poll; it is updated in place and trimmed to the current delta texts
        so it cannot grow without bound.
        """
        artifacts.check_encoder(self.manifest, encoder)
        built = self._item_of
        live = np.zeros(len(self._ids), dtype=bool)
        delta_rows: list[tuple[int, str, str]] = []
        for v in snapshot.variants:
            item = built.get(v.variant_id)
            if item is not None and self._questions[item] == v.question and self._faq_ids[item] == v.faq_id:
                live[item] = True
            else:
                delta_rows.append((v.variant_id, v.faq_id, v.question))
        tombstones = ~live  # in the build but deleted or changed since

        texts = [q for _, _, q in delta_rows]
        built_answers = self._built_answers()
        answer_rows: list[tuple[str, str]] = []  # (faq_id, answer) of the live answer segment
        if built_answers is not None:
            answer_rows = [(f, answer) for f, (answer, _) in sorted(snapshot.faqs.items()) if not is_placeholder(answer)]
        new_answers = [a for f, a in answer_rows if built_answers is None or built_answers.get(f, (None,))[0] != a]
        cache = cache if cache is not None else {}
        missing = sorted({t for t in texts + new_answers if t not in cache})
        if missing:
            for text, vec in zip(missing, np.asarray(encoder.encode(missing), dtype=np.float32)):
                cache[text] = vec
        delta_vecs = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            delta_vecs[row] = cache[text]
        for text in set(cache) - set(texts) - set(new_answers):
            del cache[text]
        answer_vectors = None
        if built_answers is not None:
            matrix = np.zeros((len(answer_rows), self.dim), dtype=np.float32)
            for row, (f, answer) in enumerate(answer_rows):
                built = built_answers.get(f)
                matrix[row] = built[1] if built is not None and built[0] == answer else cache[answer]
            answer_vectors = AnswerVectors([f for f, _ in answer_rows], matrix, [a for _, a in answer_rows])
        fresh = Retriever(
            self.build_dir, self.manifest, self._ann, self._ids, self._faq_ids, self._questions,
            item_of=self._item_of, tombstones=tombstones, delta_vecs=delta_vecs, delta_rows=delta_rows,
            answers=dict(snapshot.faqs), kb_revision=snapshot.revision, answer_vectors=answer_vectors,
            details=dict(getattr(snapshot, "details", None) or {}),
            exact=self._exact, backend=self._backend,
        )
        if built_answers is not None:  # the build's own, not this snapshot's: what the next with_kb reuses
            fresh.__dict__["_built_answer_map"] = built_answers
        return fresh

    def _built_answers(self) -> dict[str, tuple[str, np.ndarray]] | None:
        """faq_id -> (answer text, vector) as the build encoded them; None when the build uses no answers."""
        if self.answer_vectors is None or self.answer_vectors.texts is None:
            return None
        built = self.__dict__.get("_built_answer_map")
        if built is None:  # the build's segment; with_kb copies pass it on
            av = self.answer_vectors
            built = {f: (t, av.vectors[i]) for i, (f, t) in enumerate(zip(av.faq_ids, av.texts))}
            self.__dict__["_built_answer_map"] = built
        return built

    def stage_vectors(self, key: str) -> tuple[list[str], np.ndarray] | None:
        """A re-ranking stage's phrasing vectors stored with this build (index/build.py
        `write_stage_vectors`, memory-mapped) and the build's phrasing texts in the same row order; None
        when the build has none under `key` (built before the stage was configured, or by another model)."""
        if key not in (self.manifest.get("stage_vectors") or {}):
            return None
        path = self.build_dir / artifacts.STAGE_VECTORS_DIR / f"{key}.npy"
        if not path.is_file():
            return None
        matrix = np.load(path, mmap_mode="r")
        if matrix.ndim != 2 or matrix.shape[0] != len(self._questions):
            return None
        return self._questions, matrix

    def faq_variants(self, faq_id: str) -> list[tuple[int, str]]:
        """(variant_id, question) of a FAQ's live phrasings (build minus tombstones, plus delta)."""
        by_faq = self.__dict__.get("_variants_by_faq")
        if by_faq is None:  # built once per retriever (immutable), on first use
            by_faq = {}
            for vid, f, q, dead in zip(self._ids.tolist(), self._faq_ids, self._questions, self._tombstones.tolist()):
                if not dead:
                    by_faq.setdefault(f, []).append((int(vid), q))
            for vid, f, q in self._delta_rows:
                by_faq.setdefault(f, []).append((vid, q))
            self.__dict__["_variants_by_faq"] = by_faq
        return by_faq.get(faq_id, [])

    @property
    def context_only(self) -> frozenset[str]:
        """The FAQs answered only as the follow-up of an FAQ that prompts to them: never a candidate of a
        query matched without that context. Computed once per retriever (each snapshot makes a new one)."""
        hidden = self.__dict__.get("_context_only")
        if hidden is None:
            hidden = self.__dict__["_context_only"] = frozenset(
                f for f, d in self.details.items() if getattr(d, "context_only", False))
        return hidden

    # --- introspection ----------------------------------------------------------------------------
    @property
    def n_delta(self) -> int:
        return len(self._delta_rows)

    @property
    def n_tombstones(self) -> int:
        return self._n_tombstones

    @property
    def tombstones(self) -> np.ndarray:
        """(n_build_variants,) bool: build variants deleted or edited since the build (read-only)."""
        return self._tombstones

    @property
    def delta_rows(self) -> list[tuple[int, str, str]]:
        """(variant_id, faq_id, question) of the phrasings added or edited since the build."""
        return self._delta_rows

    @property
    def n_build_variants(self) -> int:
        return len(self._ids)

    @property
    def ann(self) -> Any:
        """The build's vector index (its `item_vectors(rows)` are the build variants' stored vectors)."""
        return self._ann

    @property
    def item_faqs(self) -> tuple[list[str], np.ndarray]:
        """(the build's distinct faq_ids, (n_build_variants,) each item's row among them): a filter is
        resolved per FAQ, then spread to the items in one step. Shared by every with_kb() copy."""
        found = self.__dict__.get("_item_faqs")
        if found is None:
            names = sorted(set(self._faq_ids))
            row = {f: i for i, f in enumerate(names)}
            found = (names, np.fromiter((row[f] for f in self._faq_ids), dtype=np.int64, count=len(self._faq_ids)))
            self.__dict__["_item_faqs"] = found
        return found

    @property
    def build_variant_ids(self) -> np.ndarray:
        """The build variants' variant_ids, in build order (Annoy item -> variant_id)."""
        return self._ids

    @property
    def build_faq_ids(self) -> list[str]:
        """The build variants' faq_ids, in build order (tombstoned ones included)."""
        return self._faq_ids

    @property
    def build_questions(self) -> list[str]:
        """The build variants' texts, in build order (tombstoned ones included)."""
        return self._questions

    @property
    def variant_counts(self) -> dict[str, int]:
        """faq_id -> live phrasings (build minus tombstones, plus delta); computed once per retriever."""
        counts = self.__dict__.get("_variant_counts")
        if counts is None:
            live = Counter(f for f, dead in zip(self._faq_ids, self._tombstones.tolist()) if not dead)
            counts = dict(live + Counter(faq_id for _, faq_id, _ in self._delta_rows))
            self.__dict__["_variant_counts"] = counts
        return counts

    @property
    def calibration(self) -> tuple[float, float]:
        """(a, b) with p(match) = sigmoid(a * cos + b), from the manifest."""
        cal = self.manifest.get("calibration") or {}
        from index.calibration import DEFAULT_A, DEFAULT_B

        return float(cal.get("a", DEFAULT_A)), float(cal.get("b", DEFAULT_B))

    def vectors_of(self, variant_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Stored vectors of live variants (build or delta) by variant_id, for scoring candidates from
        another recall stage (the lexical arms): (vectors (n, dim) float32, found (n,) bool). Rows of
        variants this retriever does not serve as they were built (unknown, deleted, or edited since
        the build: the caller's text is the old one) are zero with found False."""
        vectors = np.zeros((len(variant_ids), self.dim), dtype=np.float32)
        found = np.zeros(len(variant_ids), dtype=bool)
        delta_row = self.__dict__.get("_delta_row_of")
        if delta_row is None:  # built once per retriever (immutable), on first use
            delta_row = {vid: row for row, (vid, _, _) in enumerate(self._delta_rows)}
            self.__dict__["_delta_row_of"] = delta_row
        build_rows, build_items = [], []
        for row, vid in enumerate(variant_ids):
            item = self._item_of.get(int(vid))
            if item is not None and not self._tombstones[item]:
                build_rows.append(row)
                build_items.append(item)
            elif item is None and int(vid) in delta_row:  # an edited build variant stays not found
                vectors[row] = self._delta_vecs[delta_row[int(vid)]]
                found[row] = True
        if build_items:
            vectors[build_rows] = self._ann.item_vectors(build_items)
            found[build_rows] = True
        return vectors, found

    # --- search -------------------------------------------------------------------------------------
    def search(self, vecs: np.ndarray, k: int, selection: Selection | None = None) -> list[list[Hit]]:
        """Per query, the k most similar live variants (Annoy minus tombstones, plus delta), best first;
        with a `selection` (`select(filter)`), only its FAQs' variants, searched exactly (index/selection.py)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        vecs = np.asarray(vecs, dtype=np.float32)
        if vecs.ndim == 1:
            vecs = vecs[None, :]
        if vecs.ndim != 2 or vecs.shape[1] != self.dim:
            raise ValueError(f"query vectors: expected shape (q, {self.dim}), got {vecs.shape}")
        rows = None if selection is None else selection.delta_rows  # None: every delta row, no copy
        delta = self._delta_vecs if rows is None else self._delta_vecs[rows]
        delta_scores = vecs @ delta.T if len(delta) else None
        built = self._search_built(vecs, k) if selection is None else self._search_selected(vecs, k, selection)
        results = []
        for row in range(len(vecs)):
            hits = built[row]
            if delta_scores is not None:
                scores = delta_scores[row]
                top = np.argsort(-scores, kind="stable")[:k]
                for j in top.tolist():
                    vid, faq_id, question = self._delta_rows[j if rows is None else int(rows[j])]
                    hits.append(Hit(vid, faq_id, question, float(scores[j])))
                hits.sort(key=lambda h: -h.cosine)
            results.append(hits[:k])
        return results

    def select(self, flt: Any) -> Selection:
        """The FAQs, build items and delta rows that `flt` (kb.filters.FaqFilter) keeps; cached per filter."""
        return resolve(self, flt)

    def _search_built(self, vecs: np.ndarray, k: int) -> list[list[Hit]]:
        """Per query, the k most similar live build variants, best first, from wherever the build is searched."""
        if self._backend is not None:
            return self._search_backend(vecs, k)
        if self._exact is not None:
            return self._search_exact(vecs, k)
        return [self._search_annoy(vec, k) for vec in vecs]

    def _search_selected(self, vecs: np.ndarray, k: int, selection: Selection) -> list[list[Hit]]:
        """`_search_built` inside a selection: exact in the matrix product, the selected rows' vectors when
        they fit one, else Annoy asked deeper in proportion until k selected variants come back."""
        items = selection.items
        if not len(items):
            return [[] for _ in vecs]
        if self._backend is not None:
            return self._search_backend(vecs, k, selection)
        if self._exact is not None:  # the whole product costs less than copying the selected rows out
            return [self._top_items(items, scores[items], k) for scores in self._exact_scores(vecs)]
        if len(items) * self.dim <= SELECTED_MAX_CELLS:
            matrix = self.__dict__.setdefault("_selected_vectors", {}).get(selection.key)
            if matrix is None:
                store = self.__dict__["_selected_vectors"]
                if len(store) >= SELECTED_VECTOR_SETS:
                    store.pop(next(iter(store)))
                matrix = store[selection.key] = self._ann.item_vectors(items.tolist())
            return [self._top_items(items, scores, k) for scores in vecs @ matrix.T]
        keep = np.zeros(len(self._ids), dtype=bool)
        keep[items] = True
        share = len(items) / len(self._ids)
        # the build's search_k buys its recall over every item; a filter keeping a share of them needs the
        # search to look that much wider for the same recall among its own
        search_k = -1 if self.search_k == -1 else int(min(self.search_k / share, self.search_k * 64))
        out = []
        for vec in vecs:
            fetch = min(len(self._ids), int(np.ceil(2 * k / share)) + self._n_tombstones)
            while True:
                found, cosines = self._ann.search_one(vec, fetch, search_k)
                hits = [Hit(int(self._ids[i]), self._faq_ids[i], self._questions[i], float(c))
                        for i, c in zip(found, cosines) if keep[i]]
                if len(hits) >= min(k, len(items)) or fetch >= len(self._ids):
                    break
                fetch = min(len(self._ids), fetch * 2)
            out.append(hits[:k])
        return out

    def _top_items(self, items: np.ndarray, scores: np.ndarray, k: int) -> list[Hit]:
        want = min(k, len(items))
        top = np.argpartition(-scores, want - 1)[:want]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [Hit(int(self._ids[items[j]]), self._faq_ids[items[j]], self._questions[items[j]], float(scores[j]))
                for j in top.tolist()]

    def _search_backend(self, vecs: np.ndarray, k: int, selection: Selection | None = None) -> list[list[Hit]]:
        """The backend's candidates re-ranked by their exact cosine: its own scores may come from quantized
        vectors, and everything downstream (pooling, calibration, thresholds) was fitted on exact ones.
        A selection goes to the backend as the FAQ ids its search is filtered to."""
        want = min(k, len(self._ids) - self._n_tombstones if selection is None else len(selection.items))
        if want <= 0:
            return [[] for _ in vecs]
        dead = self.__dict__.get("_dead_ids")
        if dead is None:  # once per retriever (immutable)
            dead = self._ids[self._tombstones].tolist()
            self.__dict__["_dead_ids"] = dead
        only = None if selection is None else sorted(selection.faq_ids)
        out = []
        for vec, (vids, matrix) in zip(vecs, self._backend.search(vecs, want, exclude=dead, faq_ids=only)):
            if matrix is None:  # ids only: the build folder's copy of the same vectors
                matrix = self.vectors_of(vids.tolist())[0]
            hits = []
            for vid, cosine in zip(vids.tolist(), (matrix @ vec).tolist() if len(vids) else []):
                item = self._item_of.get(int(vid))
                if item is not None and not self._tombstones[item] and (only is None or self._faq_ids[item] in
                                                                         selection.faq_ids):
                    hits.append(Hit(int(vid), self._faq_ids[item], self._questions[item], float(cosine)))
            hits.sort(key=lambda h: -h.cosine)
            out.append(hits[:k])
        return out

    def _search_exact(self, vecs: np.ndarray, k: int) -> list[list[Hit]]:
        """Every query against every live build vector in one matrix product: for a small build this
        is faster than Annoy at the search_k its recall needs, and exact."""
        scores = self._exact_scores(vecs)
        scores = scores.copy() if self._n_tombstones else scores
        if self._n_tombstones:
            scores[:, self._tombstones] = -np.inf
        want = min(k, len(self._ids) - self._n_tombstones)
        if want <= 0:
            return [[] for _ in vecs]
        top = np.argpartition(-scores, want - 1, axis=1)[:, :want]
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        out = []
        for items, cosines in zip(np.take_along_axis(top, order, axis=1).tolist(),
                                  np.take_along_axis(top_scores, order, axis=1).tolist()):
            out.append([Hit(int(self._ids[i]), self._faq_ids[i], self._questions[i], float(c))
                        for i, c in zip(items, cosines)])
        return out

    def _exact_scores(self, vecs: np.ndarray) -> np.ndarray:
        """(q, n_build_variants) cosines with every build vector, tombstoned ones included; the last call's
        rows are remembered per thread (`deepen` asks again for the same queries)."""
        keys = [v.tobytes() for v in vecs]
        recent: dict[bytes, np.ndarray] = getattr(self._recent, "rows", {})
        todo = [i for i, key in enumerate(keys) if key not in recent]
        fresh = vecs[todo] @ self._exact.T if todo else None  # (len(todo), n)
        scores = np.empty((len(vecs), len(self._ids)), dtype=np.float32)
        for row, key in enumerate(keys):
            if key in recent:
                scores[row] = recent[key]
        if fresh is not None:
            scores[todo] = fresh
        self._recent.rows = {key: scores[row] for row, key in enumerate(keys)}
        return scores

    def _search_annoy(self, vec: np.ndarray, k: int) -> list[Hit]:
        n_live = len(self._ids) - self._n_tombstones
        want = min(k, n_live)
        if want <= 0:
            return []
        # Over-fetch by the number of tombstones (capped: with many tombstones most are far away), and
        # fetch more only in the rare case the filtered list comes up short.
        fetch = min(len(self._ids), k + min(self._n_tombstones, 2 * k + 32))
        while True:
            items, cosines = self._ann.search_one(vec, fetch, self.search_k)
            hits = [
                Hit(int(self._ids[i]), self._faq_ids[i], self._questions[i], float(c))
                for i, c in zip(items, cosines) if not self._tombstones[i]
            ]
            if len(hits) >= want or fetch >= len(self._ids):
                return hits[:k]
            if len(items) < fetch and self.search_k != -1:
                return hits[:k]  # a fixed search_k is exhausted; asking for more would not find more
            fetch = min(len(self._ids), fetch * 2)


def _load_answers(build_dir: Path, manifest: dict) -> AnswerVectors | None:
    if not (manifest.get("answers") or {}).get("used"):
        return None
    vectors = np.load(build_dir / artifacts.ANSWERS_FILE).astype(np.float32)
    faq_ids, texts = [], []
    with open(build_dir / artifacts.ANSWER_MAP_FILE, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            faq_ids.append(row["faq_id"])
            texts.append(row["answer"])
    return AnswerVectors(faq_ids, vectors, texts)
