"""The round loop and everything it needs that is not llama.cpp: sequences, drafts, sampling, γ,
statistics."""
