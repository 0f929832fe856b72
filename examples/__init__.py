"""Example programs; each is runnable as ``python -m timely_examples.NAME`` and tested in tests/."""
