"""The headers dygrad.jit's generated kernels include travel with the package (python/CMakeLists.txt,
DYGRAD_JIT_HEADERS; docs/jit-fusion.md): the list is every header the generated code includes, directly or not, and a
compile against an installed copy of them (`cmake --install`, what a wheel holds) loads its kernels."""
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dygrad as dg

ROOT = Path(__file__).resolve().parents[2]


def installed_list():
    text = (ROOT / "python" / "CMakeLists.txt").read_text()
    block = re.search(r"set\(DYGRAD_JIT_HEADERS([^)]*)\)", text).group(1)
    return set(block.split())


def closure(source):
    todo = re.findall(r'#include "dygrad/([^"]+)"', source)
    seen = set()
    while todo:
        h = todo.pop()
        if h in seen:
            continue
        seen.add(h)
        todo += re.findall(r'#include "dygrad/([^"]+)"', (ROOT / "src" / "dygrad" / h).read_text())
    return seen


def composed(x, w):
    return x * (x * x).mean(-1, keepdim=True).add(1e-5).rsqrt() * w


def test_the_installed_headers_are_what_the_generated_code_includes():
    src = dg.jit.source(composed, dg.randn(4, 37), dg.randn(37))
    assert "extern \"C\"" in src
    assert closure(src) == installed_list()


@pytest.mark.skipif(not (ROOT / "build" / "CMakeCache.txt").is_file() or shutil.which("cmake") is None,
                    reason="needs the build tree and cmake")
def test_kernels_compile_against_the_installed_headers(tmp_path):
    out = subprocess.run(["cmake", "--install", str(ROOT / "build"), "--prefix", str(tmp_path / "inst")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    include = tmp_path / "inst" / "dygrad" / "include"
    assert {str(p.relative_to(include / "dygrad")) for p in include.rglob("*.h")} == installed_list()
    script = textwrap.dedent(f"""
        import warnings
        import dygrad as dg
        dg.jit.config.cache_dir = {str(tmp_path / "cache")!r}
        dg.jit.config.background = False
        def f(x, w):
            return x * (x * x).mean(-1, keepdim=True).add(1e-5).rsqrt() * w
        x, w = dg.randn(4, 37), dg.randn(37)
        g = dg.jit(f, jit_level="O1")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(3):
                y = g(x, w)
        assert g.stats["fused_kernels"] == 1 and dg.equal(y, f(x, w))
        print("ok")
    """)
    env = dict(os.environ, DG_JIT_INCLUDE=str(include))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
    assert list((tmp_path / "cache").glob("*.so"))
