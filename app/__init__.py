"""The FAQ matching service: the store (SQLAlchemy), the request pipeline and the FastAPI app; the `faq`
CLI (cli/) drives it.

Data flows one way: FaqStore -> Encoder (models/) -> Retriever over the built index (index/) -> Pipeline
(pipeline.py: re-ranking stages, decision) -> /match.
"""
