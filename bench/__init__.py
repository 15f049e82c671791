"""specrun's benchmark scripts: a package, so the tests (and `python -m bench.NAME` from the
repository root) import them by name; each also runs as `python bench/NAME.py`."""
