"""Training an EAGLE-3 head for a GGUF target with torch (the `train` extra).

`data` collects the target's answers and what it computed for them (through
`specrun.llama.capture`), `head` is the EAGLE-3 network as llama.cpp's `eagle3` graph
computes it, `fit` trains it (`train_head`) and `gguf_io` reads the target's rows and
writes the head's GGUF. Nothing below this package imports torch.
"""
