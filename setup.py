"""What pyproject.toml cannot yet say in a stable way: sampling's top-k search in C
(specrun/_topk.c, no dependencies). Optional: where it does not compile, the install goes
on and specrun/sampling.py does the same search in numpy, a distribution taking about
twice as long (1.5x at a 152k vocabulary, 2.2x at 49k)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("specrun._topk", ["specrun/_topk.c"], optional=True)])
