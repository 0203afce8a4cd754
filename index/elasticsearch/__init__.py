"""Elasticsearch, both ways the service uses it: the BM25 engine of the lexical arms and the vector store."""
