"""Example programs; each is runnable as ``python -m examples.NAME`` and tested in tests/."""
