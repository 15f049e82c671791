"""What the tests share: tiny GGUF models, a Hub on loopback, a terminal, the greedy-identity
check."""
