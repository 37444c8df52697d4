#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine (docs/cuda.md, "The GPU check"): one run of at most 5 minutes that builds
# dygrad there for sm_90, runs the CUDA unit tests and the conformance sweep on cuda against cpu, and benchmarks the
# TinyLlama-1.1B shape in bf16 against PyTorch eager and torch.compile on the same GPU. Each phase appends its part
# of the report to $OUT/report.md as it finishes (and its log to $OUT/<phase>.log), under a time limit of its own, so
# a run cut short still returns what ran. A phase that needs a GPU says so and skips without one (`nvidia-smi`
# absent), as does a phase with nothing to run yet.
#
# Usage:  bench/gpu_check.sh --prepare   (here, before the device run: copies the serial OpenBLAS, which the device
#                                         machine lacks, with libgfortran and libquadmath, into .gpu-deps/ for
#                                         the run to carry: ~37 MiB)
#         OUT=/some/dir bench/gpu_check.sh [phase ...]   (phases: env build unit sweep bench; default: all;
#                                         GPU_CHECK_BUILD_LIMIT=seconds overrides the build phase's 170)
# On the device machine (the `run` tool): command "bash bench/gpu_check.sh", carry [".gpu-deps"].
set -u -o pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
REPORT=$OUT/report.md
BUILD=${GPU_CHECK_BUILD:-$ROOT/build-gpu}
DEPS=$ROOT/.gpu-deps
PYTHON=${PYTHON:-python3}
START=$(date +%s)

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$DEPS/openblas/include" "$DEPS/openblas/lib"
  cp /usr/include/x86_64-linux-gnu/openblas-serial/*.h "$DEPS/openblas/include/"
  cp -L /usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0 "$DEPS/openblas/lib/"
  # Its own dependencies, which a machine without OpenBLAS may lack too (found at link time through -rpath-link).
  for lib in libgfortran.so.5 libquadmath.so.0; do cp -L "/lib/x86_64-linux-gnu/$lib" "$DEPS/openblas/lib/"; done
  ln -sf libopenblas.so.0 "$DEPS/openblas/lib/libopenblas.so"
  du -sh "$DEPS"
  exit 0
fi

note() { printf '%s\n' "$*" >> "$REPORT"; }
elapsed() { echo $(( $(date +%s) - START )); }
HAVE_GPU=0
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then HAVE_GPU=1; fi
NO_GPU="skipped: no GPU here (nvidia-smi is absent or lists none)"

# run_phase NAME LIMIT_SECONDS COMMAND...: the command's output to $OUT/NAME.log, its outcome to the report.
run_phase() {
  local name=$1 limit=$2
  shift 2
  local begin rc
  begin=$(date +%s)
  timeout --signal=TERM --kill-after=5 "$limit" bash -c "$*" > "$OUT/$name.log" 2>&1
  rc=$?
  local took=$(( $(date +%s) - begin ))
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    note "- $name: TIMED OUT after ${limit} s (log: $name.log)"
  elif [ $rc -eq 0 ]; then
    note "- $name: ok in ${took} s (log: $name.log)"
  else
    note "- $name: FAILED (exit $rc) in ${took} s (log: $name.log); its last lines:"
    tail -n 15 "$OUT/$name.log" | sed 's/^/      /' >> "$REPORT"
  fi
  return $rc
}

phase_env() {
  note "# dygrad GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  note ""
  note "## Environment"
  {
    echo "- host: $(uname -m), $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
    if [ $HAVE_GPU = 1 ]; then
      echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
    else
      echo "- GPU: none (nvidia-smi absent or lists none)"
    fi
    echo "- nvcc: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -1)"
    echo "- python: $($PYTHON --version 2>&1); cmake: $(cmake --version 2>/dev/null | head -1); ninja: $(ninja --version 2>/dev/null)"
    echo "- torch: $($PYTHON -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
    echo "- nanobind: $($PYTHON -c 'import nanobind; print(nanobind.__version__)' 2>&1 | tail -1)"
    echo "- OpenBLAS: $( [ -f "$DEPS/openblas/lib/libopenblas.so.0" ] && echo "carried in .gpu-deps" || echo "the system's (if any)")"
  } >> "$REPORT"
  note ""
  note "## Phases (elapsed at start: $(elapsed) s)"
}

# The library, its CUDA plugin for sm_90 and the Python extension for this machine's Python, in build-gpu/ (native
# ISA: no CPU kernel plugins to compile; no C++ tests: GoogleTest is not on the device machine).
phase_build() {
  local blas=()
  if [ -f "$DEPS/openblas/lib/libopenblas.so.0" ]; then
    blas=(-DOPENBLAS_SERIAL_INCLUDE="$DEPS/openblas/include" -DOPENBLAS_SERIAL_LIB="$DEPS/openblas/lib/libopenblas.so"
          "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$DEPS/openblas/lib"
          "-DCMAKE_MODULE_LINKER_FLAGS=-Wl,-rpath-link,$DEPS/openblas/lib")
  fi
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYGRAD_CUDA=ON -DDYGRAD_CUDA_ARCHS=90 \
    -DCMAKE_INSTALL_PREFIX="$BUILD/install" \
    -DDYGRAD_ISA=native -DDYGRAD_BUILD_TESTS=OFF -DDYGRAD_BUILD_BENCH=OFF -DDYGRAD_BUILD_EXAMPLES=OFF \
    -DDYGRAD_BUILD_PYTHON=ON -DDYGRAD_ONEDNN=OFF -DDYGRAD_MPI=OFF \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" "${blas[@]}" &&
  ninja -C "$BUILD" -j "$(nproc)" &&
  cmake --install "$BUILD" > /dev/null &&
  ls -la "$BUILD/install/dygrad/"
}

# dygrad from the build: the package's Python files with the extension and plugins installed beside them.
with_dygrad() {
  local pkg=$BUILD/pkg
  rm -rf "$pkg" && mkdir -p "$pkg" && cp -r "$ROOT/python/dygrad" "$pkg/" && cp "$BUILD"/install/dygrad/*.so* "$pkg/dygrad/" &&
  PYTHONPATH=$pkg:${PYTHONPATH:-} LD_LIBRARY_PATH=$DEPS/openblas/lib:${LD_LIBRARY_PATH:-} "$@"
}

phase_unit() {
  with_dygrad "$PYTHON" -m pytest -q -x "$ROOT/tests/python/test_cuda.py" -p no:cacheprovider
}

phase_sweep() {
  DYGRAD_SWEEP_DEVICE=cuda:0 with_dygrad "$PYTHON" -m pytest -q "$ROOT/tests/python/test_conformance.py" \
    -k test_on_test_device -p no:cacheprovider --maxfail=50
}

phase_bench() {
  with_dygrad "$PYTHON" "$ROOT/bench/gpu_llama.py" --out "$OUT/bench.md"
}

# The phases run in `bash -c` under `timeout`: they see these functions and variables through the environment.
export ROOT OUT BUILD DEPS PYTHON
export -f phase_build with_dygrad phase_unit phase_sweep phase_bench

PHASES=("$@")
[ ${#PHASES[@]} -eq 0 ] && PHASES=(env build unit sweep bench)
for phase in "${PHASES[@]}"; do
  case $phase in
    env) phase_env ;;
    build) run_phase build "${GPU_CHECK_BUILD_LIMIT:-170}" phase_build ;;
    unit)
      if [ $HAVE_GPU = 0 ]; then note "- unit: $NO_GPU"; else run_phase unit 30 phase_unit; fi ;;
    sweep)
      if [ $HAVE_GPU = 0 ]; then note "- sweep: $NO_GPU"; else run_phase sweep 45 phase_sweep; fi ;;
    bench)
      if [ $HAVE_GPU = 0 ]; then note "- bench: $NO_GPU"
      else
        run_phase bench 50 phase_bench
        [ -f "$OUT/bench.md" ] && cat "$OUT/bench.md" >> "$REPORT"
      fi ;;
    *) note "- $phase: unknown phase (env build unit sweep bench)" ;;
  esac
done
note ""
note "Total: $(elapsed) s"
