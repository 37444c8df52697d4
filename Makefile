# dygrad's entry points. `make test` installs what is missing (apt and pip), builds and runs every test.
#   make test       deps, configure + build in $(BUILD), run the C++ suite (ctest) and the Python tests, then the
#                   kernel-sensitive tests at each lower kernel level the CPU runs (make test-levels)
#   make sanitize   the C++ suite under ASan+UBSan (build-asan), the executor tests under TSan (build-tsan)
#   make bench      build with the benchmarks and run them (results go into bench/RESULTS.md by hand)
#   make check-layers  the include-direction check (part of `make test`)
#   make sweep      the exhaustive conformance sweep (every op, case, layout, dtype); `make test` runs the fast one
#   make test-gradgrad  gradcheck and gradgradcheck of every differentiable op on every case of the full sweep,
#                   and tests/python/test_double_backward.py (`make test` runs them on each op's first case)
#   make test-aarch64  cross-compile the library, the C++ suite and the Python extension for 64-bit Arm
#                   (build-aarch64) and run the C++ suite under qemu-aarch64 (not part of `make test`)
PYTHON ?= python3
BUILD ?= build
JOBS ?= $(shell nproc)
# fortunes: the default training corpus (python/dygrad/data/corpus.py says why). qemu-user: the test that a CPU
# without AVX-512 runs the baseline kernels (docs/ops.md, "One binary for every CPU").
APT_PACKAGES = cmake ninja-build g++ libopenblas-serial-dev libopenblas-pthread-dev libgtest-dev libgmock-dev \
               libbenchmark-dev valgrind fortunes chromium openmpi-bin libopenmpi-dev qemu-user
# torch==2.13.0 is the peer the Python tests compare against (a CPU wheel on the machine's disk); transformers (pinned)
# is the library tests/python/test_transformers.py runs on both (issue 41); einops (pinned) is what the port program
# tests/python/port/gpt2_einops.py imports, under torch and under dygrad.as_torch (issue 37).
# oneDNN (float32 GEMM, CMakeLists.txt: DYGRAD_ONEDNN): installed when the release packages it; without it the
# build falls back to OpenBLAS with a warning.
APT_OPTIONAL = libdnnl-dev
PIP_PACKAGES = numpy pytest scikit-build-core nanobind torch==2.13.0 transformers==5.25.0 onnx==1.23.2 onnxruntime==1.32.0 \
               einops==0.8.2
PIP_MODULES = numpy, pytest, scikit_build_core, nanobind, torch, transformers, onnx, onnxruntime, einops

# Whether package $$p is installed for this machine's architecture (or for all): `dpkg -s NAME` fails as ambiguous
# once the same package is installed for a second architecture too (make test-aarch64 adds arm64's).
APT_HAS = dpkg-query -W -f='$${Architecture} $${db:Status-Abbrev}\n' $$p 2>/dev/null | \
          grep -qE "^($$(dpkg --print-architecture)|all) ii"

# Sanitizer builds: -O1 keeps the instrumented code fast enough and compiles in about half the time of -O3.
SANITIZE_CMAKE = -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
                 -DDYGRAD_BUILD_BENCH=OFF -DDYGRAD_BUILD_EXAMPLES=OFF
# TSan runs the executor and threading suites: every thread in them is dygrad's own (the stream worker, the
# pool helpers, the communication thread, the tests' threads) and the BLAS is the serial one, so every thread is
# instrumented.
TSAN_TESTS ?= Stream*:ThreadPool*:Allocator*:ExpandableSegments*:Context*:Comm*:OpSink*:Scratch*:Jit*:Device*
# Report the first error and fail; nothing of dygrad's is suppressed.
ASAN_ENV = ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# Set SANITIZE_IN_TEST=0 to leave the sanitizer runs out of `make test` (see README: CI runs them).
SANITIZE_IN_TEST ?= 1

.PHONY: all deps build install train test test-cpp test-python test-levels check-layers sweep test-gradgrad fuzz fuzz-loaders stress sanitize sanitize-asan sanitize-tsan bench clean deps-aarch64 test-aarch64

all: build

# Installs system and Python packages only when something is missing (no network use otherwise).
deps:
	@missing=""; for p in $(APT_PACKAGES); do $(APT_HAS) || missing="$$missing $$p"; done; \
	optional=""; for p in $(APT_OPTIONAL); do $(APT_HAS) || optional="$$optional $$p"; done; \
	if [ -n "$$missing$$optional" ]; then \
	  echo "installing:$$missing$$optional"; \
	  apt-get update -qq; \
	  for p in $$optional; do apt-cache show $$p >/dev/null 2>&1 && missing="$$missing $$p" \
	    || echo "note: $$p is not packaged here; continuing without it"; done; \
	  if [ -n "$$missing" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	fi
	@$(PYTHON) -c "import $(PIP_MODULES)" 2>/dev/null || $(PYTHON) -m pip install -q $(PIP_PACKAGES)

# Configured every time (cheap when cached): an isolated `pip install .` leaves $(BUILD) pointing at a
# temporary CMake that pip deletes; re-configuring repairs it.
build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYGRAD_BUILD_BENCH=OFF >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The Python package, editable, built in $(BUILD) (pyproject.toml: build-dir = "build").
install: build
	$(PYTHON) -m pip install -q --no-build-isolation -e .

# The main job: train the `tiny` LLaMA on the default corpus with live metrics and a profile report.
TRAIN_ARGS ?= --config tiny --steps 300 --out runs/tiny --profile
# RANKS=N: data parallel over N ranks on this machine (mpirun through dygrad.distributed.run).
RANKS ?= 1
train: install
	@if [ "$(RANKS)" = "1" ]; then $(PYTHON) -m dygrad.train $(TRAIN_ARGS); \
	else $(PYTHON) -m dygrad.distributed.run --nproc-per-node $(RANKS) -m dygrad.train $(TRAIN_ARGS); fi

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j 1  # serial: some profiler tests classify timings

# The Python tests join once the package exists (pyproject.toml); the extension builds in $(BUILD) too.
test-python: install
	$(PYTHON) -m pytest -q tests/python

# tests/python/conformance/README.md; its perf mode is `python3 bench/sweep_perf.py` (not a test).
sweep: install
	DYGRAD_SWEEP=full $(PYTHON) -m pytest -q tests/python/test_conformance.py

test-gradgrad: install
	DYGRAD_SWEEP=full $(PYTHON) -m pytest -q tests/python/test_conformance.py -k "gradcheck or gradgradcheck"
	$(PYTHON) -m pytest -q tests/python/test_double_backward.py

# The include-direction rule of docs/ops.md, "Layers": a lower layer never includes a higher one.
check-layers:
	$(PYTHON) tools/check_layers.py

test: check-layers test-cpp test-python test-levels

# The kernel-sensitive tests once more at each lower kernel level this CPU runs (docs/ops.md, "One binary for every
# CPU"): test-python ran them at the highest; DYGRAD_CPU_ISA caps the level. torch runs at its AVX2 capability where
# the CPU has AVX2 (ATEN_CPU_CAPABILITY=avx2: it contracts into fused multiply-adds as its AVX-512 code does), so
# every level, the FMA-less baseline included, is compared with a contracting peer: the pairing that failed on an
# AVX2-only CPU before the tolerances were derived.
# The LLaMA parity runs the fused model only: the composed model's ops are the conformance sweep's, at each level.
# dygrad.jit's O1 tests: the generated code is compiled for the level's ISA (its exp and log fast forms included).
KERNEL_TESTS = tests/python/test_conformance.py tests/python/test_optim.py tests/python/test_llama_parity.py \
               tests/python/test_port_programs.py tests/python/test_fused.py tests/python/test_jit_fusion.py \
               tests/python/test_jit_fusion_rows.py tests/python/test_jit_bf16.py \
               tests/python/test_jit_fusion_select.py -k "not unfused"
test-levels: install
	@levels=$$($(PYTHON) -c "import dygrad; print(' '.join(dygrad.backends.cpu.kernel_levels()[:-1]))"); \
	cap=$$(grep -qw avx2 /proc/cpuinfo && echo avx2 || echo default); \
	for level in $$levels; do \
	  echo "== kernel level $$level (torch: ATEN_CPU_CAPABILITY=$$cap)"; \
	  DYGRAD_CPU_ISA=$$level ATEN_CPU_CAPABILITY=$$cap $(PYTHON) -m pytest -q $(KERNEL_TESTS) || exit 1; \
	done

# The fuzzers: `make test` runs them bounded with a fixed seed (test_fuzz.py: 60 s of the op fuzzer,
# tests/python/fuzzer.py; test_load_fuzz.py: 6000 inputs of the loader fuzzer, tests/python/fuzz_loaders.py);
# this runs each for FUZZ_SECONDS. What they find goes to tests/python/fuzz_regressions/ (replayed by make test).
# `make fuzz-loaders` runs the loader fuzzer alone.
FUZZ_SECONDS ?= 1800
FUZZ_SEED ?= 1
fuzz: install
	$(PYTHON) tests/python/fuzzer.py --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED)
	$(PYTHON) tests/python/fuzz_loaders.py --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED)

fuzz-loaders: install
	$(PYTHON) tests/python/fuzz_loaders.py --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED)

# The long reliability loops (tools/stress.py): 200 exits with a busy thread, retain_grad and a training
# loop over 10k iterations with RSS flat. Bounded versions are in tests/python/test_reliability.py.
stress: install
	$(PYTHON) tools/stress.py
ifeq ($(SANITIZE_IN_TEST),1)
test: sanitize
endif

sanitize: sanitize-asan sanitize-tsan

sanitize-asan: deps
	cmake -S . -B build-asan $(SANITIZE_CMAKE) -DDYGRAD_SANITIZE="address;undefined" >/dev/null
	cmake --build build-asan -j $(JOBS) --target dygrad_tests
	$(ASAN_ENV) build-asan/tests/cpp/dygrad_tests --gtest_brief=1

sanitize-tsan: deps
	cmake -S . -B build-tsan $(SANITIZE_CMAKE) -DDYGRAD_SANITIZE=thread >/dev/null
	cmake --build build-tsan -j $(JOBS) --target dygrad_tests
	$(TSAN_ENV) build-tsan/tests/cpp/dygrad_tests --gtest_brief=1 --gtest_filter='$(TSAN_TESTS)'

# Arm64 (docs/ops.md, "One binary for every CPU"): cmake/aarch64-linux-gnu.cmake cross-compiles with Debian's
# g++-aarch64-linux-gnu against Debian's arm64 packages (multiarch: `dpkg --add-architecture arm64`), and ctest runs
# every test under qemu-aarch64. Its own target, not in CI (README: its time). Without:
# - oneDNN: Debian 12's libdnnl-dev:arm64 cannot be installed beside the amd64 one (their dnnl_config.h differ),
#   and its arm64 dnnl_sgemm is the reference GEMM; float32 GEMM goes to the serial OpenBLAS (CMakeLists.txt).
# - OpenMPI: libopenmpi-dev:arm64 would remove the amd64 openmpi-bin that `make deps` installs; the C++ suite's
#   collectives run on the one-process group, which needs no MPI.
# Every C++ test runs; none is excluded. The float-pattern sweeps of tests/cpp/test_vec_math.cpp sample every 51st
# pattern (DYGRAD_PATTERN_STEP): their default steps took 93 s and 274 s under qemu. The extension is built, not
# imported: there is no arm64 numpy or torch.
AARCH64_BUILD ?= build-aarch64
AARCH64_APT = g++-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user ninja-build cmake \
              libopenblas-serial-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libpython3.11-dev:arm64
deps-aarch64:
	@dpkg --print-foreign-architectures | grep -qx arm64 || { echo "adding the arm64 architecture"; \
	  dpkg --add-architecture arm64; }
	@missing=""; for p in $(AARCH64_APT); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@$(PYTHON) -c "import nanobind" 2>/dev/null || $(PYTHON) -m pip install -q nanobind

test-aarch64: deps-aarch64
	cmake -S . -B $(AARCH64_BUILD) -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
	  -DDYGRAD_BUILD_BENCH=OFF -DDYGRAD_BUILD_PYTHON=ON -DDYGRAD_MPI=OFF >/dev/null
	cmake --build $(AARCH64_BUILD) -j $(JOBS)
	cd $(AARCH64_BUILD) && DYGRAD_PATTERN_STEP=51 ctest --output-on-failure -j 1  # serial, as test-cpp

# Benchmarks build in $(BUILD) with DYGRAD_BUILD_BENCH=ON; each bench_* prints its comparison and ratio.
bench: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYGRAD_BUILD_BENCH=ON >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	@for b in $(BUILD)/bench/bench_*; do \
	  if [ -x "$$b" ] && [ -f "$$b" ]; then echo "== $$b"; "$$b" || exit 1; fi; \
	done
	BUILD=$(BUILD) bench/enqueue_callgrind.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan $(AARCH64_BUILD)
