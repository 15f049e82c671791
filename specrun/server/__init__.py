"""`specrun serve`: the OpenAI-compatible HTTP API over one `Engine`."""
