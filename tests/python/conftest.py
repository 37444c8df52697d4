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


def pytest_report_header(config):
    isa, note, features = dg.backends.cpu.kernel_isa()
    return [f"dygrad kernels: {isa} ({note or 'the highest level'}; levels here: "
            f"{' '.join(dg.backends.cpu.kernel_levels())}); CPU: {features}; "
            f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '(unset)')}"]


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_device_ops: runs ops on the test device (passes once every op allocates "
                                       "its outputs on its inputs' device, issue 34's op sweep)")


def pytest_sessionstart(session):
    """DYGRAD_CPU_ISA=LEVEL (make test-levels) must run that level's kernels: a run that silently ran another would
    prove nothing about it."""
    want = os.environ.get("DYGRAD_CPU_ISA")
    if want and dg.backends.cpu.kernel_isa()[0] not in ("native", want):
        raise pytest.UsageError(f"DYGRAD_CPU_ISA={want}, but the kernels in use are "
                                f"{dg.backends.cpu.kernel_isa()}")


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


@pytest.fixture
def restore_context():
    """The context (threads, deterministic, synchronize) as it was before the test, whatever the test set."""
    original = dg.get_context()
    yield
    dg.set_context(original)


@pytest.fixture
def jit_config(tmp_path_factory):
    """dygrad.jit.config for a test of O1: this session's kernel cache, compiles a capture waits for (no timing in
    the tests); every field restored after."""
    import dygrad as dg
    cfg = dg.jit.config
    saved = {k: getattr(cfg, k) for k in cfg._FIELDS}
    cfg.cache_dir = str(tmp_path_factory.getbasetemp() / "jit-cache")
    cfg.background = False
    yield cfg
    for k, v in saved.items():
        setattr(cfg, k, v)
