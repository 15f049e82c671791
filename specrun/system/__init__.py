"""The process's edges: signals, threads, files, text in and out, figures as people read them."""
