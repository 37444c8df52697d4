"""Checks the machine code of the float32 transcendental kernels at each kernel level (docs/ops.md, "One binary
for every CPU"): the loops of exp, log, tanh, sigmoid, silu, gelu, sin, cos and pow must be vectorised at
the level's width (packed xmm at the baseline, packed fused multiply-adds on ymm at avx2 and zmm at avx512, on
NEON's vector lanes at aarch64's neon level; pow's arithmetic is in double, so its packed operations are on
doubles) and call no libm function (a call per element is what made the baseline run at scalar speed).

    python3 tools/check_kernel_code.py [--objdump OBJDUMP] [--nm NM] LEVEL=LIBRARY [LEVEL=LIBRARY ...]

LIBRARY is an unstripped build product (build/libdygrad.so for the baseline, build/libdygrad_cpu_avx2.so ...);
ctest runs it on the build's own (tests/cpp/CMakeLists.txt), with the target's binutils (a cross build's
aarch64-linux-gnu-objdump)."""
import re
import subprocess
import sys

# The float32 contiguous loop of each kernel: the function (demangled) instantiated with its per-element lambda
# for float.
KERNELS = {k: rf"unary_contiguous<dg::cpu::{k}_kernel\(dg::Task&\)::.*, float, float>"
           for k in ("tanh", "sigmoid", "silu", "gelu")}
# exp, log, sin and cos: the float32 block loop of guarded_unary (backend/cpu/unary.cpp); the full function for
# arguments out of range (math::exp, math::log, libm's sinf / cosf) is a function of its own, outside the vector
# loop.
# pow: the float32 loops of pow (tensor exponent) and of a number raised to a tensor (rpow_scalar: one lambda, where
# pow_scalar has one per exponent with an exact form).
KERNELS["pow"] = r"binary_contiguous_out<dg::cpu::pow_kernel\(dg::Task&\)::.*, float, float>"
KERNELS["rpow_scalar"] = r"unary_contiguous<dg::cpu::rpow_scalar_kernel\(dg::Task&\)::.*, float, float>"
KERNELS.update({k: rf"^dg::cpu::\(anonymous namespace\)::guarded_unary<dg::cpu::{k}_kernel\(dg::Task&\)"
                   rf".*::operator\(\)<float>\(\) const::\{{lambda\(long, long\)#1\}}::operator\(\)\(long, long\)"
                for k in ("exp", "log", "sin", "cos")})
# What each level's packed arithmetic looks like: the fma levels must use fused multiply-adds on their full width;
# the baseline (no FMA) packed multiplies on xmm; aarch64's neon fmla/fmls on a full vector (v0.4s, v0.2d). Floats
# or doubles (pow computes in double).
PACKED = {
    "baseline": re.compile(r"\bmulp[sd]\b.*%xmm"),
    "avx2": re.compile(r"\bvfn?m(add|sub)\d+p[sd]\b.*%ymm"),
    "avx512": re.compile(r"\bvfn?m(add|sub)\d+p[sd]\b.*%zmm"),
    "neon": re.compile(r"\bfml[as]\s+v\d+\.(4s|2d),"),
}
LIBM_NAMES = r"(fmaf?|expf?|logf?|powf?|exp2f?|log2f?|tanhf?|erff?|erfcf?|expm1f?|floorf?|__\w+_finite)"
# A call into libm. x86-64: direct (`call <expf@plt>`) or through the GOT (-fno-plt: `call *...(%rip)  #
# <fmaf@GLIBC_2.2.5>`). aarch64: direct (`bl <expf@plt>`) or through the GOT (-fno-plt: `adrp xM, PAGE; ldr xN,
# [xM, #OFFSET]; ... blr xN`), which names no function: the slot's address is followed back to its dynamic
# relocation (`objdump -R`), and a `blr` whose target cannot be followed counts as a failure.
LIBM = re.compile(r"\bcall\b.*<" + LIBM_NAMES + r"(@plt|@GLIBC[\w.]*)?>|\bbl\s.*<" + LIBM_NAMES + r"(@plt)?>")
LIBM_SYMBOL = re.compile(r"^" + LIBM_NAMES + r"(@\w[\w.]*)?$")
INDIRECT_CALL = re.compile(r"\bblr\s+(x\d+)")
ADRP = re.compile(r"\badrp\s+(x\d+),\s*([0-9a-f]+)\b")
LDR_SLOT = re.compile(r"\bldr\s+(x\d+),\s*\[(x\d+),\s*#(\d+)\]")


def got_slots(path, objdump):
    """{address of a GOT slot: the symbol its dynamic relocation names} of a shared object."""
    out = subprocess.run([objdump, "-R", path], capture_output=True, text=True, check=True).stdout
    slots = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and re.fullmatch(r"[0-9a-f]+", parts[0]):
            slots[int(parts[0], 16)] = parts[2]
    return slots


def indirect_targets(body, slots):
    """The functions the `blr` of an aarch64 function body call: for each, the GOT slot its register was last loaded
    from (an adrp's page plus the ldr's offset) before the call, in address order; None where that cannot be
    followed (then the call counts as one into libm)."""
    pages, loaded, targets = {}, {}, []
    for line in body:
        if m := ADRP.search(line):
            pages[m.group(1)] = int(m.group(2), 16)
            loaded.pop(m.group(1), None)
        elif m := LDR_SLOT.search(line):
            base = pages.get(m.group(2))
            loaded[m.group(1)] = slots.get(base + int(m.group(3))) if base is not None else None
        elif m := INDIRECT_CALL.search(line):
            targets.append((m.group(1), loaded.get(m.group(1))))
    return targets


def functions(path, patterns, nm="nm", objdump="objdump"):
    """{demangled name: [instruction lines]} of the functions of a shared object whose names match a pattern: their
    addresses and sizes from nm, then objdump over each one's range only (a whole plugin takes seconds)."""
    symbols = subprocess.run([nm, "-C", "-S", "--defined-only", path], capture_output=True, text=True,
                             check=True).stdout
    result = {}
    for line in symbols.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4 or parts[2] not in "tT" or not any(re.search(p, parts[3]) for p in patterns):
            continue
        begin, size = int(parts[0], 16), int(parts[1], 16)
        out = subprocess.run([objdump, "-d", "--no-show-raw-insn", "-C", f"--start-address={begin:#x}",
                              f"--stop-address={begin + size:#x}", path], capture_output=True, text=True,
                             check=True).stdout
        result[parts[3]] = [ln for ln in out.splitlines() if re.match(r"^\s+[0-9a-f]+:\t", ln)]
    return result


def check(level, path, nm="nm", objdump="objdump"):
    """{kernel: [problems]} of one level's library."""
    problems = {}
    code = functions(path, KERNELS.values(), nm, objdump)
    slots = None
    for kernel, pattern in KERNELS.items():
        found = [name for name in code if re.search(pattern, name)]
        p = problems.setdefault(kernel, [])
        if not found:
            p.append(f"{level}: no float32 loop of {kernel} in {path}")
            continue
        body = [line for name in found for line in code[name]]
        if not any(PACKED[level].search(line) for line in body):
            p.append(f"{level}: the float32 {kernel} loop has no packed {PACKED[level].pattern} ({found[0][:90]})")
        calls = sorted({m.group(1) or m.group(3) for line in body for m in [LIBM.search(line)] if m})
        if any(INDIRECT_CALL.search(line) for line in body):
            slots = got_slots(path, objdump) if slots is None else slots
            calls += sorted({f"an indirect call (blr {reg}) to {target or 'a target not followed to its GOT slot'}"
                             for reg, target in indirect_targets(body, slots)
                             if target is None or LIBM_SYMBOL.match(target)})
        if calls:
            p.append(f"{level}: the float32 {kernel} loop calls libm: {', '.join(calls)}")
    return problems


def main(argv):
    tools = {"--nm": "nm", "--objdump": "objdump"}
    while len(argv) >= 2 and argv[0] in tools:
        tools[argv[0]] = argv[1]
        argv = argv[2:]
    if not argv:
        print(__doc__)
        return 2
    passed = failed = 0
    for arg in argv:
        level, _, path = arg.partition("=")
        if level not in PACKED:
            print(f"unknown level {level!r} ({', '.join(PACKED)})")
            return 2
        for kernel, problems in check(level, path, tools["--nm"], tools["--objdump"]).items():
            for p in problems:
                print("FAIL", p)
            passed, failed = passed + (not problems), failed + bool(problems)
        print(f"{level}: {path}: {len(KERNELS)} kernels checked")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
