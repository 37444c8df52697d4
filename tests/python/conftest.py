"""Shared fixtures for the Python tests: every test starts with an idle stream and no pending error."""
import os

import pytest

import dygrad as dg

# DYGRAD_SYNCHRONIZE=1 runs every op inline (errors and crashes surface at the op that caused them).
if os.environ.get("DYGRAD_SYNCHRONIZE") == "1":
    dg.set_context(synchronize=True)


@pytest.fixture(autouse=True)
def drained_stream():
    yield
    try:
        dg.synchronize()
    except Exception:  # a deferred error a test provoked on purpose
        pass
