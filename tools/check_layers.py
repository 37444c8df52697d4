#!/usr/bin/env python3
"""Fails when a lower layer of src/dygrad includes a higher one (../shared/docs/ARCHITECTURE.md, "Layers").

    core/        -> nothing of dygrad but core
    math/        -> nothing of dygrad but math (device-neutral scalar math, standard headers only: docs/ops.md)
    runtime/     -> core
    ops/ autograd/ -> core, runtime (and each other)
    backend/<device>/ -> core, runtime, math and its own folder
    profiler/    -> core, runtime
    jit/ distributed/ io/ -> anything below
    dygrad.h     -> the public API: core, runtime, ops, autograd, profiler
    python/src/  -> the same, distributed/, jit/ and dygrad.h (bindings never reach into a backend)

Usage: python3 tools/check_layers.py [repo root]; prints each offending #include and exits 1 if any.
"""
import pathlib
import re
import sys

ALLOWED = {
    "core": {"core"},
    "math": {"math"},
    "runtime": {"core", "runtime"},
    "ops": {"core", "runtime", "ops", "autograd"},
    "autograd": {"core", "runtime", "ops", "autograd"},
    "profiler": {"core", "runtime", "profiler"},
}
UPPER = {"core", "math", "runtime", "ops", "autograd", "profiler", "backend", "jit", "distributed", "io"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"dygrad/([^"]+)"', re.M)


def layer_of(include_path: str) -> str:
    parts = include_path.split("/")
    if parts[0] == "backend" and len(parts) > 2:
        return "backend/" + parts[1]
    return parts[0] if len(parts) > 1 else include_path  # "dygrad.h" is the umbrella header


def allowed_for(source: pathlib.Path, src_root: pathlib.Path, python_src: pathlib.Path):
    if python_src in source.parents:
        return {"core", "runtime", "ops", "autograd", "profiler", "distributed", "jit", "umbrella"}, "python/src"
    rel = source.relative_to(src_root).parts
    if len(rel) == 1:  # dygrad.h: the public API, everything but the backends' internals
        return {"core", "runtime", "ops", "autograd", "profiler"}, rel[0]
    top = rel[0]
    if top == "backend":
        device = "backend/" + rel[1]
        return {"core", "runtime", "math", device}, device
    if top in ("jit", "distributed", "io"):
        return None, top
    return ALLOWED.get(top), top


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    src_root = root / "src" / "dygrad"
    python_src = root / "python" / "src"
    problems, checked = [], 0
    for source in sorted(list(src_root.rglob("*.h")) + list(src_root.rglob("*.cpp")) +
                         list(python_src.glob("*.h")) + list(python_src.glob("*.cpp"))):
        allowed, layer = allowed_for(source, src_root, python_src)
        if allowed is None:
            continue
        text = source.read_text()
        for match in INCLUDE.finditer(text):
            target = layer_of(match.group(1))
            if target == "dygrad.h":
                target = "umbrella"
            checked += 1
            if target not in allowed:
                line = text[: match.start()].count("\n") + 1
                problems.append(f"{source.relative_to(root)}:{line}: {layer} includes dygrad/{match.group(1)} "
                                f"({target} is not below {layer})")
    for p in problems:
        print(p)
    print(f"check_layers: {checked} includes checked, {len(problems)} crossing a layer upwards")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
