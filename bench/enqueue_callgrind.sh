#!/usr/bin/env bash
# Instructions per op call on the host thread, counted by callgrind: `bench/enqueue_callgrind.sh [VARIANT] [N]`
# (VARIANT: add, add_, add_scalar, or all (default); N calls, default 20000).
#
# What is counted: every instruction the host thread executes inside the N calls of the variant's wrapper
# (callgrind_add, callgrind_add_inplace, callgrind_add_scalar in bench/bench_enqueue.cpp), i.e. inside
# dg::add / dg::add_ and everything they call: argument checks, type promotion, output allocation
# (TensorImpl and Storage from the object pools, the caching allocator), Task construction in the ring,
# publishing, the futex wake of the worker when it sleeps (the syscall counts as one instruction; kernel
# time is not counted), and reclaiming finished Tasks (which frees earlier outputs). Plus the wrapper's own
# call/return and the assignment of the result (a handle swap). Not counted: warm-up calls (made directly,
# not through the wrapper), the loop around the calls, and everything on other threads: the stream
# worker's kernel execution and the pool helpers. --toggle-collect switches collection per thread on entry
# and exit of the wrapper, and --separate-threads=yes writes one file per thread; the script reports the
# main thread's total and prints the other threads' totals (expected 0) as a check.
#
# The library's host path is x86-64-v2 code and its kernels load per CPU level (docs/ops.md, "One binary for every
# CPU"): under valgrind, whose CPUID reports no AVX-512, the AVX2 kernels load, so any build counts the same host
# instructions. When $BUILD has no bench_enqueue (benchmarks off), build-callgrind is configured with them on.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-all}
calls=${2:-20000}
build=${BUILD:-build}
if [ ! -x "$build/bench/bench_enqueue" ]; then
  build=build-callgrind
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYGRAD_BUILD_TESTS=OFF -DDYGRAD_BUILD_PYTHON=OFF \
        -DDYGRAD_BUILD_BENCH=ON -DDYGRAD_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)" --target bench_enqueue >/dev/null
fi
binary="$build/bench/bench_enqueue"
[ -x "$binary" ] || { echo "missing $binary: build with -DDYGRAD_BUILD_BENCH=ON" >&2; exit 1; }

declare -A wrapper=([add]=callgrind_add [add_]=callgrind_add_inplace [add_scalar]=callgrind_add_scalar)
if [ "$variant" = all ]; then variants="add add_ add_scalar"; else variants="$variant"; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf "%-12s %10s %16s %14s  %s\n" variant calls host_instr instr_per_op "other threads"
for v in $variants; do
  fn=${wrapper[$v]:?unknown variant $v}
  valgrind --tool=callgrind --toggle-collect="$fn" --separate-threads=yes \
           --callgrind-out-file="$work/$v.out" "$binary" --callgrind "$v" "$calls" >/dev/null 2>"$work/$v.log" \
    || { cat "$work/$v.log" >&2; exit 1; }
  main_file=$(ls "$work/$v.out"-01)
  total() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }
  main_ir=$(total "$main_file")
  others=""
  for f in "$work/$v.out"-*; do [ "$f" = "$main_file" ] || others="$others $(total "$f")"; done
  per_op=$(awk -v total="$main_ir" -v n="$calls" 'BEGIN { printf "%.0f", total / n }')
  printf "%-12s %10d %16d %14s  %s\n" "$v" "$calls" "$main_ir" "$per_op" "${others# }"
done
