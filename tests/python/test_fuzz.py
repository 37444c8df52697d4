"""The fuzzer in `make test`: bounded in time, fixed seed (tests/python/fuzzer.py; `make fuzz` runs it long).
Every crash or hang it ever found is replayed from tests/python/fuzz_regressions/."""
import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fuzzer  # noqa: E402

SECONDS = float(os.environ.get("DYGRAD_FUZZ_SECONDS", "60"))  # at most 3 minutes in make test


def test_fuzz_bounded_run_finds_no_crash_or_hang():
    failures, cases = fuzzer.run(SECONDS, seed=11, hang_s=60.0, keep=False)
    assert not failures, "\n".join(json.dumps(f)[:1500] for f in failures)
    assert cases > 1000


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(fuzzer.REGRESSIONS, "*.json"))) or [None])
def test_fuzz_regression_replays_cleanly(path):
    if path is None:
        pytest.skip("no fuzzer regression kept yet")
    found = json.load(open(path))
    r = subprocess.run([sys.executable, fuzzer.__file__, "--replay", str(found["seed"]), str(found["case"])],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_fuzzer_covers_every_public_callable_and_the_specs():
    import dygrad as dg
    from conformance import ENTRIES
    names = {n for n, _ in fuzzer.callables(dg)}
    assert {"dg.add", "dg.zeros", "F.embedding", "_C.adamw_step"} <= names
    assert len(fuzzer.tensor_methods(dg)) > 100 and len(ENTRIES) > 50
