"""Where a GGUF comes from: the catalog, the Hugging Face cache and downloads, the demo pair."""
