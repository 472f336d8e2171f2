"""Helpers shared by test modules (on sys.path via ``pythonpath = ["tests"]`` in pyproject)."""
