"""The FAQ matching service: store (SQLAlchemy), pipeline, FastAPI app and the `faq` CLI.

Data flows one way: FaqStore -> Encoder (models/) -> AnnIndex (index/) -> Retriever -> Matcher -> /match.
"""
