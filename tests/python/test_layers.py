"""tools/check_layers.py: the include-direction check CI runs (ARCHITECTURE.md, "Layers")."""
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "check_layers.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def test_the_tree_keeps_its_layers():
    result = run(ROOT)
    assert result.returncode == 0, result.stdout
    assert "0 crossing a layer upwards" in result.stdout


def copy_sources(tmp_path):
    for part in ("src/dygrad", "python/src"):
        shutil.copytree(ROOT / part, tmp_path / part)
    return tmp_path


def test_a_lower_layer_including_a_higher_one_fails(tmp_path):
    root = copy_sources(tmp_path)
    cases = {
        "src/dygrad/core/tensor.cpp": "dygrad/runtime/stream.h",         # core -> runtime
        "src/dygrad/runtime/stream.cpp": "dygrad/ops/dispatch.h",        # runtime -> ops
        "src/dygrad/backend/cpu/unary.cpp": "dygrad/ops/math.h",         # backend -> ops
        "src/dygrad/ops/math.cpp": "dygrad/backend/cpu/loops.h",         # ops -> backend
        "src/dygrad/profiler/profiler.cpp": "dygrad/autograd/node.h",    # profiler -> autograd
        "python/src/runtime.cpp": "dygrad/backend/cpu/fused_blas.h",     # bindings -> backend
    }
    for path, include in cases.items():
        f = root / path
        f.write_text(f'#include "{include}"\n' + f.read_text())
    result = run(root)
    assert result.returncode == 1
    for path in cases:
        assert path + ":1:" in result.stdout, result.stdout
    assert f"{len(cases)} crossing a layer upwards" in result.stdout
