"""What pyproject.toml cannot yet say in a stable way: sampling's hot path in C
(specrun/core/_sampling.c, no dependencies). Optional: where it does not compile, the install
goes on and specrun/core/sampling.py does the same in numpy, a distribution taking two to
three times as long (DESIGN.md, One round)."""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("specrun.core._sampling", ["specrun/core/_sampling.c"], optional=True)]
)
