"""Shared fixtures for the Python tests: every test starts with an idle stream and no pending error."""
import pytest

import dygrad as dg


@pytest.fixture(autouse=True)
def drained_stream():
    yield
    try:
        dg.synchronize()
    except Exception:  # a deferred error a test provoked on purpose
        pass
