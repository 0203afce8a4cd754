"""Vector index: Annoy wrapper, versioned build artifacts, the offline build job and the retriever."""
