"""Shared fixtures for the Python tests: every test starts with an idle stream and no pending error."""
import os

import pytest

import dygrad as dg

# DYGRAD_SYNCHRONIZE=1 runs every op inline (errors and crashes surface at the op that caused them).
if os.environ.get("DYGRAD_SYNCHRONIZE") == "1":
    dg.set_context(synchronize=True)
# DYGRAD_INLINE_SMALL_OPS=0 sends every op to the stream worker, even tiny ones on an idle stream
# (docs/stream.md, "Inline execution"): the suite then covers the queued path only.
if os.environ.get("DYGRAD_INLINE_SMALL_OPS") == "0":
    dg.set_context(inline_small_ops=False)


@pytest.fixture(autouse=True)
def drained_stream():
    yield
    try:
        dg.synchronize()
    except Exception:  # a deferred error a test provoked on purpose
        pass


@pytest.fixture
def synchronize_mode():
    """Synchronize mode for one test (every op runs at its call): exact allocator figures at any instant. Opt in
    with `pytestmark = pytest.mark.usefixtures("synchronize_mode")`."""
    old = dg.get_context()
    dg.set_context(synchronize=True)
    yield
    dg.set_context(old)
