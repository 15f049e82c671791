"""The GPU measurement kit (README.md here); the tests import its modules by name."""
