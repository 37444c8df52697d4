"""The profiler's figures of merit (docs/profiler-python.md, "Metrics and advisor"): the machine's peak FLOP/s
measured by a calibration GEMM, model-formula FLOPs, MFU/HFU, throughput, linearity and the memory report.

Notation: BS batch size per rank, N sequence length (T in the model code), L layers, d model dim, F ffn dim,
H heads, V vocabulary, P parameter count.
"""
import time

import dygrad as dg

# Keys of the allocator's per-category counters (src/dygrad/runtime/allocator.h, MemoryCategory), in order.
MEMORY_CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "temporary", "other", "scratch",
                     "communication")

# The calibration GEMM is n x n @ n x n (2 n^3 flops), n = 2048 as in the peer's `torch_ref.py gemm` (the MFU
# denominator of ../shared/docs/BENCHMARKS.md). 1024^3 under-measured the peak with oneDNN's GEMM tiles (226-240
# GFLOP/s against 305 at 2048^3 and 311-319 on the model's own 2048x384x1024 shapes), inflating MFU.
CALIBRATION_N = 2048
CALIBRATION_REPEATS = 5

_peak_cache = {}  # (dtype name, num_threads, n) -> FLOP/s


def measure_peak_flops(dtype=None, n=CALIBRATION_N, repeats=CALIBRATION_REPEATS):
    """The machine's GEMM FLOP/s in `dtype`, measured now with dygrad's own matmul: an n^3 product, best of
    `repeats` after one warm-up. Cached per (dtype, num_threads, n) for the life of the process."""
    dtype = dtype or dg.float32
    key = (str(dtype), dg.get_context().num_threads, n)
    if key not in _peak_cache:
        a = dg.randn((n, n), dtype=dtype)
        b = dg.randn((n, n), dtype=dtype)
        (a @ b).sum().item()  # warm-up: thread pool, allocator cache, GEMM packing buffers
        best = 0.0
        for _ in range(repeats):
            begin = time.perf_counter()
            a @ b  # the product's buffer returns to the allocator's cache for the next repeat
            dg.synchronize()
            best = max(best, 2 * n ** 3 / (time.perf_counter() - begin))
        _peak_cache[key] = best
        del a, b
        dg.empty_cache()  # the calibration's three n x n buffers are not the program's memory
    return _peak_cache[key]


_bandwidth_cache = {}  # (num_threads, bytes) -> bytes/s

BANDWIDTH_BYTES = 64 << 20  # large enough to leave every cache: the copy streams from and to memory


def measure_memory_bandwidth(nbytes=BANDWIDTH_BYTES, repeats=CALIBRATION_REPEATS):
    """The machine's memory bandwidth in bytes/s, measured now with dygrad's own copy kernel: copy_ of a float32
    buffer of `nbytes` into another (nbytes read + nbytes written), best of `repeats` after one warm-up. The
    denominator of a memory-bound op's roofline (the advisor's slow-kernel rule). Cached per (num_threads, nbytes)
    for the life of the process."""
    key = (dg.get_context().num_threads, nbytes)
    if key not in _bandwidth_cache:
        src = dg.ones(nbytes // 4)
        dst = dg.zeros(nbytes // 4)  # both written once: their pages are faulted in before the timing
        dst.copy_(src)
        dg.synchronize()
        best = 0.0
        for _ in range(repeats):
            begin = time.perf_counter()
            dst.copy_(src)
            dg.synchronize()
            best = max(best, 2 * nbytes / (time.perf_counter() - begin))
        _bandwidth_cache[key] = best
        del src, dst
        dg.empty_cache()
    return _bandwidth_cache[key]


def cpu_features(path="/proc/cpuinfo"):
    """{"model": the CPU's model name, "avx512_bf16": bool, "amx": [amx_* flags]} from /proc/cpuinfo (empty flags
    where it cannot be read): what a bf16 figure records, and what the advisor's bf16 rule reads."""
    model, flags = "unknown", set()
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"model": model, "avx512_bf16": "avx512_bf16" in flags, "amx": sorted(f for f in flags if f.startswith("amx"))}


def cpu_description(features=None):
    """One line naming the CPU and its bf16 features ("AMD EPYC, avx512_bf16 yes, amx none"), recorded with
    every peak and MFU figure (a bf16 figure means little without it)."""
    f = features if features is not None else cpu_features()
    return (f"{f['model']}, avx512_bf16 {'yes' if f['avx512_bf16'] else 'no'}, "
            f"amx {' '.join(f['amx']) if f['amx'] else 'none'}")


def peak_flops(dtype=None, given=None):
    """(peak FLOP/s, where it came from): `given` (the user's figure) wins over a calibration GEMM. A given figure
    that is this process's calibration of that dtype (dygrad.train passes its own) is reported as measured."""
    dtype = dtype or dg.float32
    threads = dg.get_context().num_threads
    name = str(dtype).replace("dygrad.", "")
    measured = (f"measured: {CALIBRATION_N}^3 {name} GEMM with dygrad's matmul, best of {CALIBRATION_REPEATS}, "
                f"{threads} threads; CPU {cpu_description()}")
    if given is not None:
        if given <= 0:
            raise ValueError(f"[peak_flops] a peak must be positive (got {given})")
        if _peak_cache.get((str(dtype), threads, CALIBRATION_N)) == given:
            return float(given), measured
        return float(given), "given by the user"
    return measure_peak_flops(dtype), measured


def llama_num_params(config):
    """P for a LLaMA config (BENCHMARKS.md): per layer two RMSNorm weights, fused QKV + output (4 d^2) and the
    SwiGLU MLP (3 d F); plus embedding and untied head (2 V d) and the final norm (d)."""
    per_layer = 2 * config.dim + 4 * config.dim * config.dim + 3 * config.dim * config.ffn_dim
    return config.n_layers * per_layer + 2 * config.vocab_size * config.dim + config.dim


def llama_flops_per_token(config, seq_len=None):
    """Training FLOPs per token, BENCHMARKS.md's PaLM/nanoGPT estimate 6 P + 12 L d N (the MFU numerator; the
    same count as LlamaConfig.flops_per_token, which bench/train.py and dygrad.train use)."""
    n = config.seq_len if seq_len is None else seq_len
    return 6 * llama_num_params(config) + 12 * config.n_layers * config.dim * n


def mfu(model_flops_per_step, step_s, peak):
    """Model FLOPs utilisation: the model formula's FLOPs per second over the peak (None without a formula)."""
    if model_flops_per_step is None or not step_s or not peak:
        return None
    return model_flops_per_step / step_s / peak


def hfu(executed_flops_per_step, step_s, peak):
    """Hardware FLOPs utilisation: the executed ops' FLOPs (the op table's cost functions, recompute included)
    per second over the peak."""
    if executed_flops_per_step is None or not step_s or not peak:
        return None
    return executed_flops_per_step / step_s / peak


def throughput(batch_size, seq_len, step_s, ranks=1):
    """(samples/s, tokens/s) = (BS * ranks / step_time, BS * N * ranks / step_time), the seed's
    `throughput = BS * N / step_time` (BS per data-parallel rank). None where an input is missing."""
    if batch_size is None or not step_s:
        return None, None
    samples = batch_size * ranks / step_s
    return samples, (samples * seq_len if seq_len is not None else None)


def linearity(runs):
    """Scaling efficiency of runs [(ranks, total throughput), ...]: total / (1-rank throughput * ranks) for each
    run, as [(ranks, linearity)] in the given order (1.0 is perfect, above 0.8 good). The 1-rank figure is the
    mean of the 1-rank runs; there must be one."""
    runs = [(int(r), float(t)) for r, t in runs]
    single = [t for r, t in runs if r == 1]
    if not single:
        raise ValueError("[linearity] needs a 1-rank run as the baseline (got ranks "
                         f"{sorted({r for r, _ in runs})})")
    base = sum(single) / len(single)
    if base <= 0:
        raise ValueError(f"[linearity] the 1-rank throughput must be positive (got {base})")
    return [(r, t / (base * r)) for r, t in runs]


# --- memory ----------------------------------------------------------------------------------------------------

def _tensor_bytes(t):
    return t.numel() * t.element_size()


def llama_activation_bytes(config, batch_size, seq_len=None, itemsize=4, fused=True):
    """Estimated bytes of the activations a LLaMA training step holds at its peak (the tensors autograd saves for
    backward), per token and layer with the fused kernels:
        RMSNorm inputs 2 d (their outputs, the linears' inputs, are recomputed from them in the backward:
        docs/autograd.md, "Rematerialized saves"), the QKV projection 3 d (rotary_attention saves it whole), the
        attention output d (also the output projection's input), w1 and w3 outputs 2 F, SwiGLU output F
        = 6 d + 3 F
    composed (fused=False) adds the norms' outputs 2 d (the composed norm has no rematerialize rule), the
    attention probabilities (H N per token), the rotated q, k, the copies and the composed RMSNorm and RoPE
    intermediates (~7 d) and SiLU's output (F). Outside the layers: the final norm's input d (its output too when
    composed), the embedding's d, logits and the loss' softmax 2 V. Checked against the allocator's activation
    bytes at the peak of a synchronous step (tests/python/test_profiler_metrics.py): within 20% for both paths.
    In async mode the host runs ahead and the outputs of queued ops add to this (the advisor reports it)."""
    n = config.seq_len if seq_len is None else seq_len
    d, f = config.dim, config.ffn_dim
    per_token_layer = 6 * d + 3 * f
    outside = 2 * d + 2 * config.vocab_size
    if not fused:
        per_token_layer += 2 * d + config.n_heads * n + 7 * d + f
        outside += d
    per_token = config.n_layers * per_token_layer + outside
    return batch_size * n * per_token * itemsize


def theoretical_memory(model=None, optimizer=None, batch_size=None, seq_len=None):
    """{"parameter", "gradient", "optimizer_state", "activation"} in bytes from the model (None without one):
    parameters sum numel * itemsize; gradients the same over requires_grad parameters; optimizer states what the
    optimizer holds, or before its first step 2x (AdamW: exp_avg, exp_avg_sq) / 1x (SGD with momentum) the
    trainable parameters; activations from llama_activation_bytes when the model has a LLaMA config (`.cfg`) and
    the batch size is known, else None."""
    if model is None:
        return None
    params = list(model.parameters())
    parameter = sum(_tensor_bytes(p) for p in params)
    trainable = sum(_tensor_bytes(p) for p in params if p.requires_grad)
    optimizer_state = 0
    if optimizer is not None:
        held = sum(_tensor_bytes(v) for state in optimizer.state.values() for v in state.values()
                   if isinstance(v, dg.Tensor))
        if held:
            optimizer_state = held
        else:
            name = type(optimizer).__name__
            if name in ("AdamW", "Adam"):
                optimizer_state = 2 * trainable
            elif any(g.get("momentum", 0) for g in optimizer.param_groups):
                optimizer_state = trainable
    activation = None
    config = getattr(model, "cfg", None)
    if config is not None and batch_size is not None and hasattr(config, "ffn_dim"):
        itemsize = params[0].element_size() if params else 4
        activation = llama_activation_bytes(config, batch_size, seq_len, itemsize,
                                            fused=getattr(model, "fused", True))
    return {"parameter": parameter, "gradient": trainable, "optimizer_state": optimizer_state,
            "activation": activation}


def memory_report(result, model=None, optimizer=None, batch_size=None, seq_len=None):
    """The memory section of summary.json: peak allocated/reserved over the session, the split by category at the
    sample with the most allocated bytes plus the fragmentation there (reserved - allocated), and the theoretical
    figures. Without memory samples (profile_memory off) the peaks are the allocator's at stop (since the last
    dg.reset_peak_memory_stats()) and the split is zeros."""
    samples = result.memory
    if samples:
        peak = max(samples, key=lambda s: s.allocated)
        at_peak = {c: int(peak.by_category.get(c, 0)) for c in MEMORY_CATEGORIES}
        at_peak["fragmentation"] = int(peak.reserved - peak.allocated)
        peak_allocated = int(peak.allocated)
        peak_reserved = int(max(s.reserved for s in samples))
    else:
        stop = result.memory_at_stop or {}  # peaks since the last dg.reset_peak_memory_stats()
        at_peak = {c: 0 for c in MEMORY_CATEGORIES}
        at_peak["fragmentation"] = 0
        peak_allocated = int(stop.get("peak_allocated", 0))
        peak_reserved = int(stop.get("peak_reserved", 0))
    return {"peak_allocated": peak_allocated, "peak_reserved": peak_reserved, "at_peak": at_peak,
            "theoretical": theoretical_memory(model, optimizer, batch_size, seq_len),
            "timeline": memory_timeline(result)}


def memory_timeline(result, max_points=2000):
    """[[t_s from the session start, allocated, reserved], ...], at most max_points, keeping each bucket's
    highest sample so the peak survives the downsampling."""
    samples = result.memory
    if not samples:
        return []
    stride = -(-len(samples) // max_points)
    points = []
    for i in range(0, len(samples), stride):
        top = max(samples[i:i + stride], key=lambda s: s.allocated)
        points.append([(top.ts_ns - result.start_ns) / 1e9, int(top.allocated), int(top.reserved)])
    return points
