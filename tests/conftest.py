"""Shared fixtures. Every test dataflow runs with one worker and with several workers in the
process (the ``workers`` fixture); each computation runs under a timeout."""

from __future__ import annotations

import pytest

TIMEOUT = 30.0
"""Seconds any single test computation may take before it fails with an explanation."""


@pytest.fixture(params=[1, 3], ids=["w1", "w3"])
def workers(request: pytest.FixtureRequest) -> int:
    return request.param  # type: ignore[no-any-return]
