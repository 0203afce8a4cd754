"""The match path: query -> candidates -> rerank -> conversation -> decision -> answers (chain.py)."""
from app.match.chain import run_pipelines
from app.match.pipeline import Pipeline
from app.match.request import NO_INDEX, NO_STAGES, FaqMatch, Group, MatchQuery, MatchResult, NoIndexError, NoStagesError

__all__ = ["NO_INDEX", "NO_STAGES", "FaqMatch", "Group", "MatchQuery", "MatchResult", "NoIndexError", "NoStagesError",
           "Pipeline", "run_pipelines"]
