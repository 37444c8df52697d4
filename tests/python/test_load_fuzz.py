"""The loader fuzzer in `make test` (tests/python/fuzz_loaders.py): a fixed seed and a fixed number of inputs,
each a mutated .pt or safetensors file loaded by every loader in a watched child process; `make fuzz` runs it
long. Every input it ever kept (a crash or a finding) is replayed from tests/python/fuzz_regressions/loaders/."""
import glob
import io
import json
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fuzz_loaders  # noqa: E402

ITERATIONS = int(os.environ.get("DYGRAD_LOAD_FUZZ_ITERATIONS", "6000"))


def test_load_fuzz_bounded_run_finds_nothing():
    findings, done = fuzz_loaders.run(seed=32, iterations=ITERATIONS, keep=False)
    assert not findings, "\n".join(json.dumps({k: v for k, v in f.items() if k != "input"})[:1500] for f in findings)
    assert done == ITERATIONS


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(fuzz_loaders.REGRESSIONS, "*.json"))) or [None])
def test_load_fuzz_regression_replays_cleanly(path):
    if path is None:
        pytest.skip("no loader fuzzer regression kept yet")
    r = subprocess.run([sys.executable, fuzz_loaders.__file__, "--replay", path], capture_output=True, text=True,
                       timeout=120)  # in a child: the input may have crashed a loader
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_fuzzer_mutations_reach_every_loader_outcome():
    """The inputs are not all refused at the first byte: some load, some fail in each layer."""
    import dygrad as dg
    seeds = fuzz_loaders.seed_files(dg)
    rng = random.Random(5)
    kinds = {fuzz_loaders.make_input(random.Random(rng.randrange(2**63)), seeds)[0] for _ in range(200)}
    assert kinds == {"pt", "safetensors"}
    outcomes = set()
    for _ in range(300):
        fmt, data = fuzz_loaders.make_input(random.Random(rng.randrange(2**63)), seeds)
        try:
            dg.load(io.BytesIO(data))
            outcomes.add((fmt, "ok"))
        except fuzz_loaders.LOAD_ERRORS as e:
            outcomes.add((fmt, type(e).__name__))
    assert {("pt", "ok"), ("pt", "RuntimeError"), ("pt", "UnpicklingError"), ("safetensors", "ok"),
            ("safetensors", "ValueError")} <= outcomes, outcomes
