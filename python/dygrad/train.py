"""The main job: train a LLaMA-style model on a text corpus with live metrics, periodic validation, atomic
checkpoints that resume exactly, metrics.jsonl, and a generated sample at the end.

    python3 -m dygrad.train --config tiny --steps 300 --out runs/tiny
    python3 -m dygrad.train --data my.txt --resume --out runs/tiny
    python3 -m dygrad.distributed.run --nproc-per-node 2 -m dygrad.train --config tiny   # data parallel

Under mpirun (or dygrad.distributed.run) every rank trains on its own batches through DistributedDataParallel
(weak scaling); with --batch-split the ranks share one global batch instead (strong scaling: the losses are the
single process's, within rounding). Rank 0 logs, evaluates, writes metrics and checkpoints (a checkpoint resumes at
any world size).
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import numpy as np

import dygrad as dg
from dygrad import data as dgdata
from dygrad.models import llama
from dygrad.optim.optimizer import state_tensor
from dygrad.profiler import recompute as recompute_report
from dygrad.profiler import metrics as profiler_metrics
from dygrad.profiler.metrics import measure_peak_flops as measure_gemm_peak
from dygrad.safetensors_io import load_file, save_file


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m dygrad.train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default="tiny", choices=sorted(llama.CONFIGS), help="model size (BENCHMARKS.md)")
    p.add_argument("--steps", type=int, default=300, help="training steps (total, counting resumed ones)")
    p.add_argument("--data", default=None, help="a text file or a uint16 token file (*.bin); default: the "
                   "offline default corpus (Debian's fortunes)")
    p.add_argument("--out", default="runs/tiny", help="directory for checkpoints, metrics.jsonl and reports")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.safetensors")
    p.add_argument("--batch-size", type=int, default=None, help="default: the config's")
    p.add_argument("--seq-len", type=int, default=None, help="default: the config's")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=20, help="linear warm-up steps, then cosine decay to --min-lr")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--eval-interval", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--save-interval", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: all cores)")
    p.add_argument("--unfused", action=argparse.BooleanOptionalAction, default=False,
                   help="compose the LLM ops from basic ops")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "bf16-pure"],
                   help="fp32; bf16: the forward under dg.autocast (float32 weights); bf16-pure: model.to(bfloat16) "
                        "with AdamW's float32 master weights (docs/mixed-precision.md). MFU is against the measured "
                        "GEMM peak of the dtype the GEMMs run in")
    p.add_argument("--sample-tokens", type=int, default=200, help="length of the text generated at the end")
    p.add_argument("--prompt", default="The ")
    p.add_argument("--profile", action="store_true", help="profile a few steps after warm-up and write a report "
                   "to OUT/profile (trace.json, op_stats.csv, breakdown.json, summary.json, report.html)")
    p.add_argument("--profile-wait", type=int, default=5, help="steps before the profiled window")
    p.add_argument("--profile-steps", type=int, default=5, help="steps profiled")
    p.add_argument("--recompute", default="none",
                   choices=["none", "full", "selective", "selective-qkv", "auto"],
                   help="activation recompute per LLaMA block (docs/recompute.md): full; selective (recompute only "
                        "the memory-bound ops: norms, rotary, SwiGLU, copies); selective-qkv (also the QKV "
                        "projection); auto (per block, to keep the peak under --recompute-budget)")
    p.add_argument("--recompute-budget", default="60%",
                   help="auto's peak budget: a percentage of the plain step's peak, or bytes (K/M/G/KiB/MiB/GiB)")
    p.add_argument("--shard", default="none", choices=["none", "zero1", "zero2", "fsdp"],
                   help="under several ranks (docs/distributed.md): zero1 shards the optimizer state "
                        "(ZeroRedundancyOptimizer), zero2 also the gradients and fsdp also the parameters "
                        "(fully_shard per block, without / with resharding after forward); checkpoints hold the "
                        "whole model and state (gathered on rank 0)")
    p.add_argument("--jit", action=argparse.BooleanOptionalAction, default=False,
                   help="compile the training step with dygrad.jit (docs/jit.md): after a warm-up and a capture "
                        "step, each step is replayed as one Task with no Python")
    p.add_argument("--jit-level", default="O0", choices=["O0", "O1"],
                   help="with --jit: O0 replays the captured ops (bitwise eager); O1 runs the passes first "
                        "(fusion, the attention pattern, rematerialization: docs/jit-fusion.md)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches of --batch-size rows per optimizer step: "
                   "each step draws batch-size x grad-accum rows (the same rows as --batch-size of their product) "
                   "and accumulates their gradients; the step's loss is their mean")
    p.add_argument("--synchronize", action=argparse.BooleanOptionalAction, default=False,
                   help="dg.set_context(synchronize=...): run every op inline on the host (debugging)")
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=False,
                   help="dg.set_context(deterministic=...): bitwise-reproducible kernels only (docs/threading.md)")
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="DistributedDataParallel's bucket_cap_mb under several ranks (default: DDP's 25)")
    p.add_argument("--gradient-as-bucket-view", action=argparse.BooleanOptionalAction, default=False,
                   help="DistributedDataParallel's gradient_as_bucket_view under several ranks")
    p.add_argument("--batch-split", action=argparse.BooleanOptionalAction, default=False,
                   help="under several ranks, strong scaling: --batch-size x --grad-accum rows are the global batch "
                        "of a step, drawn by every rank as one process draws them, each rank training on its "
                        "contiguous share (--batch-size must divide by the ranks); the logged loss is the mean over "
                        "the ranks and tokens/s counts the global batch once. Default: each rank draws its own "
                        "batches of that size (weak scaling)")
    p.add_argument("--ranks", type=int, default=0,
                   help="the ranks per machine this run is meant for (0: whatever the launcher started); checked, "
                        "not started: with N > 1 run it under `python3 -m dygrad.distributed.run --nproc-per-node N` "
                        "(a settings file from dygrad.tune carries it; docs/tune.md)")
    p.add_argument("--settings", default=None, help="a settings file (tune.json, written by python3 -m dygrad.tune; "
                   "docs/tune.md): its settings become the defaults, options given here override them, and its "
                   "environment (allocator settings) is applied by re-running this process with it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--on-error", default="stop", choices=["stop", "skip"],
                   help="a step whose ops fail (a bad batch: an index out of range...): log it and stop, or skip "
                        "it and go on; the failed step changes no parameter (docs/async-errors.md)")
    p.add_argument("--inject-bad-step", type=int, default=None, help=argparse.SUPPRESS)  # tests: a bad batch
    p.add_argument("--halt-after", type=int, default=None, help=argparse.SUPPRESS)  # tests: stop as a crash would
    settings_file = p.parse_known_args(argv)[0].settings
    if settings_file:
        from dygrad.tune.settings import load, parser_defaults
        p.set_defaults(**parser_defaults(load(settings_file), p))
    args = p.parse_args(argv)
    if args.grad_accum < 1:
        p.error(f"--grad-accum must be at least 1 (got {args.grad_accum})")
    if args.ranks < 0:
        p.error(f"--ranks must be 0 (any) or a number of ranks (got {args.ranks})")
    return args


def launcher_command(args, argv, ranks):
    """The command that starts this training run as `ranks` ranks on this machine."""
    import shlex
    argv = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python3", "-m", "dygrad.distributed.run", "--nproc-per-node", str(ranks), "-m",
                     "dygrad.train"] + [shlex.quote(a) for a in argv])


def check_ranks(args, argv, local_ranks):
    """--ranks N (a settings file's ranks per machine) against the ranks the launcher started on this machine: a
    training process cannot start its siblings, so a mismatch is an error that names the command to run."""
    if args.ranks and args.ranks != local_ranks:
        where = "this process is alone" if local_ranks == 1 else f"the launcher started {local_ranks} per machine"
        source = f" (from {args.settings})" if args.settings else ""
        raise SystemExit(f"[dygrad.train] --ranks {args.ranks}{source}: the run is meant for {args.ranks} ranks per "
                         f"machine, but {where}. Start it with\n    {launcher_command(args, argv, args.ranks)}\n"
                         f"or give --ranks 0 (any) or --ranks {local_ranks} to train as started.")


def batch_rows(batch, world, split):
    """(rows of a micro-batch on this rank, rows of a global micro-batch). Weak scaling: each rank's micro-batch is
    --batch-size rows. --batch-split: the global micro-batch is --batch-size rows, each rank's its world-th share."""
    if not split:
        return batch, batch * world
    if batch % world:
        raise SystemExit(f"[dygrad.train] --batch-split: --batch-size {batch} does not divide by the {world} ranks "
                         f"(each rank takes an equal contiguous share of the global batch's rows); give a batch size "
                         f"that is a multiple of {world}")
    return batch // world, batch


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * progress))


def checkpoint_path(out):
    return os.path.join(out, "checkpoint.safetensors")


def remove_stale_temp_files(out):
    """Deletes checkpoint temp files (``checkpoint.safetensors.tmp.<pid>``) left by a run killed while saving,
    unless their process is still alive (another trainer writing into the same directory). Returns them."""
    prefix = os.path.basename(checkpoint_path(out)) + ".tmp."
    removed = []
    for name in os.listdir(out):
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix):]
        if pid.isdigit() and int(pid) != os.getpid() and _process_alive(int(pid)):
            continue
        try:
            os.remove(os.path.join(out, name))
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed


def repair_metrics(path):
    """Drops a cut last record of metrics.jsonl (a kill while it was being written leaves a line without its
    newline), so the records appended next start on their own line and every complete record stays readable.
    Returns the bytes dropped (0: the file ends with a newline, is empty or does not exist)."""
    try:
        f = open(path, "rb+")
    except FileNotFoundError:
        return 0
    with f:
        size = f.seek(0, os.SEEK_END)
        end = size
        while end > 0:  # back from the end to the last newline, a block at a time
            begin = max(0, end - 65536)
            f.seek(begin)
            block = f.read(end - begin)
            if end == size and block.endswith(b"\n"):
                return 0
            newline = block.rfind(b"\n")
            if newline >= 0:
                end = begin + newline + 1
                break
            end = begin
        f.truncate(end)
        f.flush()
        os.fsync(f.fileno())
        return size - end


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def checkpoint_state(model, optimizer):
    """(the model's whole state dict, each parameter's whole optimizer state in the optimizer's order): gathered
    from the ranks when sharded (a collective then: every rank calls it), the tensors as they are otherwise."""
    if hasattr(optimizer, "consolidate_state_dict"):  # ZeRO-1: the state consolidated on rank 0
        optimizer.consolidate_state_dict(to=0)
        n = sum(len(g["params"]) for g in optimizer.param_groups)
        whole = optimizer.state_dict()["state"] if dg.distributed.get_rank() == 0 else {}
        return model.state_dict(), [whole.get(i, {}) for i in range(n)]
    if any(isinstance(m, dg.distributed.fsdp.FSDPModule) for m in model.modules()):
        from dygrad.distributed.fsdp import full_optimizer_states, full_state_dict
        return full_state_dict(model), full_optimizer_states(model, optimizer)
    return model.state_dict(), [optimizer.state[p] for g in optimizer.param_groups for p in g["params"]]


def save_checkpoint(path, whole, step, args):
    # bfloat16 tensors (--dtype bf16-pure) are saved as float32 (exact; NumPy has no bfloat16)
    def host(t):
        return (t.float() if t.dtype == dg.bfloat16 else t).numpy()
    model_state, states = whole
    arrays = {"model." + k: host(v) for k, v in model_state.items()}
    for i, state in enumerate(states):
        if state:
            arrays[f"optim.{i}.exp_avg"] = state["exp_avg"].numpy()
            arrays[f"optim.{i}.exp_avg_sq"] = state["exp_avg_sq"].numpy()
            if "master_param" in state:
                arrays[f"optim.{i}.master_param"] = state["master_param"].numpy()
    rng = dg.get_rng_state() if hasattr(dg, "get_rng_state") else None
    meta = {"step": step, "config": args.config,
            "optim_steps": json.dumps([float(state["step"].item()) if state else 0 for state in states]),
            "rng": json.dumps(rng) if rng is not None else ""}
    save_file(arrays, path, meta)


def load_checkpoint(path, model, optimizer):
    arrays, meta = load_file(path)
    dtypes = {k: v.dtype for k, v in model.state_dict().items()}
    whole = {k[6:]: dg.from_numpy(v).to(dtypes[k[6:]]) for k, v in arrays.items() if k.startswith("model.")}
    fsdp = any(isinstance(m, dg.distributed.fsdp.FSDPModule) for m in model.modules())
    if fsdp:  # each rank keeps its rows of each sharded parameter and optimizer state
        from dygrad.distributed.fsdp import load_full_state_dict, shard_optimizer_state
        load_full_state_dict(model, whole)
    else:
        model.load_state_dict(whole)
    steps = json.loads(meta["optim_steps"])
    owner = getattr(optimizer, "_owner", None)  # ZeRO: each rank keeps the state of its share only
    for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"]):
        if owner is not None and owner[id(p)] != optimizer.rank:
            continue
        if f"optim.{i}.exp_avg" in arrays:
            state = {"step": dg.tensor(float(steps[i]), dtype=dg.float32),
                     "exp_avg": dg.tensor(arrays[f"optim.{i}.exp_avg"]),
                     "exp_avg_sq": dg.tensor(arrays[f"optim.{i}.exp_avg_sq"])}
            if f"optim.{i}.master_param" in arrays:
                state["master_param"] = dg.tensor(arrays[f"optim.{i}.master_param"])
            if fsdp:
                state = shard_optimizer_state(model, p, state)
            optimizer.state[p] = {k: v if k == "step" else state_tensor(v) for k, v in state.items()}
    if meta.get("rng") and hasattr(dg, "set_rng_state"):
        dg.set_rng_state(json.loads(meta["rng"]))
    return int(meta["step"])


def evaluate(model, dataset, batches, batch_size, seed):
    losses = []
    with dg.no_grad():
        for i in range(batches):
            x, y = dataset.sample(batch_size, np.random.default_rng([seed, 1_000_000_007, i]))
            losses.append(model(dg.from_numpy(x), dg.from_numpy(y)).item())
    return float(np.mean(losses))


class Progress:
    """A one-line live progress bar on a terminal, plain log lines otherwise."""

    def __init__(self, total, quiet):
        self.total, self.quiet = total, quiet
        self.tty = sys.stdout.isatty()

    def update(self, step, fields, force_line=False):
        if self.quiet:
            return
        width = 24
        done = int(width * (step + 1) / self.total)
        bar = "#" * done + "." * (width - done)
        text = f"[{bar}] {step + 1}/{self.total} " + " ".join(fields)
        if self.tty and not force_line:
            print("\r" + text, end="", flush=True)
        else:
            print(text, flush=True)

    def newline(self):
        if self.tty and not self.quiet:
            print()


def profile_window(args, start):
    """(wait, active): profile `active` steps after `wait` warm-up steps of this run."""
    remaining = args.steps - start
    wait = max(0, min(args.profile_wait, remaining - 2))
    active = max(1, min(args.profile_steps, remaining - wait - 1))
    return wait, active


def start_profiler(args, start, cfg, batch, seq, model, optimizer, peak):
    """A dg.profiler session over a few steps after warm-up that writes OUT/profile (report.html etc.)."""
    wait, active = profile_window(args, start)
    # The dry run (docs/memory.md): the peak of a steady-state step (optimizer states made), before any step ran.
    # Not of a fully_shard model: its forward and backward are collectives, which meta evaluation does not run.
    estimate = None
    if getattr(model, "_fsdp_group", None) is None:
        x = dg.zeros((batch, seq), dtype=dg.int64)
        estimate = dg.memory.estimate(model, (x, x), optimizer=optimizer, steps=2)
        del x
    handler = dg.profiler.trace_handler(
        os.path.join(args.out, "profile"), label=f"{args.config} ({'unfused' if args.unfused else 'fused'})",
        command=" ".join(["python3 -m dygrad.train"] + sys.argv[1:]), batch_size=batch * args.grad_accum,
        seq_len=seq,
        model_config=cfg, model=model, optimizer=optimizer, peak=peak, memory_estimate=estimate,
        dtype=dg.float32 if args.dtype == "fp32" else dg.bfloat16)
    prof = dg.profiler.profile(schedule=dg.profiler.schedule(wait=wait, warmup=1 if wait else 0, active=active,
                                                             repeat=1, skip_first=0),
                               on_trace_ready=handler, profile_memory=True, with_modules=True)
    return prof.start()


def finish_profiler(prof, args):
    """Prints the profiled steps' breakdown and the advice (the report is in OUT/profile)."""
    run_dir = os.path.join(args.out, "profile")
    if not prof.results:
        print("profile: no step was profiled (the run was too short)")
        return
    from dygrad.profiler.__main__ import summarize
    print(summarize(run_dir))
    print(f"profile: {run_dir}/report.html, trace {run_dir}/trace.json (open in https://ui.perfetto.dev)")


_RECOMPUTE_MODES = {"full": "full", "selective": "memory_bound", "selective-qkv": "memory_bound_and_qkv"}


def parse_budget(text):
    """'60%' stays a percentage; '300MiB', '2G', '123456' become bytes."""
    text = str(text).strip()
    if text.endswith("%"):
        float(text[:-1])
        return text
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1}
    low = text.lower()
    for suffix, scale in units.items():
        if low.endswith(suffix):
            return float(low[:-len(suffix)]) * scale
    return float(low)


def setup_recompute(args, model, train_set, batch, log):
    """Measures the per-block costs on one batch (dygrad.utils.checkpoint.measure), sets the blocks' recompute
    (a plan for auto), prints the per-layer memory report. Returns (plan or None, costs, modes, step_fn)."""
    from dygrad.utils import checkpoint as ck
    probe = dgdata.DataLoader(train_set, batch, seed=args.seed + 7)
    px, py = next(probe)
    probe.close()

    def step_fn():
        loss = model(px, py)
        loss.backward()
        loss.item()

    costs = ck.measure(model, step_fn)
    the_plan = None
    if args.recompute == "auto":
        the_plan = ck.plan(model, step_fn, parse_budget(args.recompute_budget), costs=costs)
        modes = the_plan.modes
        the_plan.apply(model.blocks)
        log(str(the_plan))
    else:
        modes = model.recompute_blocks(_RECOMPUTE_MODES[args.recompute])
    log("recompute, per layer (saved: kept from the forward; recomputed: made again in the backward):\n"
        + costs.memory_report(modes))
    with open(os.path.join(args.out, "recompute.json"), "w") as f:
        json.dump(recompute_report.section(costs, modes, the_plan), f, indent=1)
    for p in model.parameters():
        p.grad = None
    return the_plan, costs, modes, step_fn


def mean_over_ranks(loss, world):
    """The mean of a scalar over the ranks (an all-reduce enqueued on the stream: the host does not wait)."""
    total = loss.detach().float().clone()
    dg.distributed.all_reduce(total)
    return total / world


def peaks_of_ranks(world, rank):
    """Every rank's allocator peak since the loop began (a collective: every rank calls it), rank order."""
    peaks = dg.zeros(world, dtype=dg.float64)
    peaks[rank] = float(dg.memory.max_memory_allocated())
    dg.distributed.all_reduce(peaks)
    return [int(v) for v in peaks.tolist()]


def main(argv=None):
    args = parse_args(argv)
    if args.settings:  # its environment (allocator settings, read when dygrad loads) needs a fresh process
        from dygrad.tune.settings import load, run_with_environment
        run_with_environment(load(args.settings), "dygrad.train", argv)
    cfg = llama.CONFIGS[args.config]
    batch = args.batch_size or cfg.batch_size
    seq = args.seq_len or cfg.seq_len
    if seq != cfg.seq_len:
        from dataclasses import replace
        cfg = replace(cfg, seq_len=seq)
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    local_ranks = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
    check_ranks(args, argv, local_ranks)  # before any work or output
    batch_rows(batch, world, args.batch_split)
    os.makedirs(args.out, exist_ok=True)
    for name in remove_stale_temp_files(args.out):
        print(f"removed stale temp file {os.path.join(args.out, name)}")
    rank = 0
    if world > 1:
        dg.distributed.init_process_group("mpi")
        rank, world = dg.distributed.get_rank(), dg.distributed.get_world_size()
        if rank != 0:  # the sample is printed by rank 0 (a sharded model generates on every rank: collectives)
            args.quiet, args.profile = True, False
            if args.shard not in ("zero2", "fsdp"):
                args.sample_tokens = 0
    if args.threads:
        dg.set_context(num_threads=args.threads)
    dg.set_context(synchronize=args.synchronize, deterministic=args.deterministic)
    split = args.batch_split and world > 1
    micro, global_micro = batch_rows(batch, world, split)
    rows = micro * args.grad_accum  # rows per optimizer step on this rank
    global_rows = global_micro * args.grad_accum  # rows per optimizer step over all ranks
    dg.manual_seed(args.seed)

    data_dir = os.path.join(args.out, "data")
    if rank == 0:  # one rank builds the corpus; the others read it
        train_path, val_path, source = dgdata.build_corpus(data_dir, path=args.data)
    if world > 1:
        dg.distributed.barrier()
    if rank != 0:
        train_path, val_path, source = os.path.join(data_dir, "train.bin"), os.path.join(data_dir, "val.bin"), ""
    train_set, val_set = dgdata.TokenDataset(train_path, seq), dgdata.TokenDataset(val_path, seq)
    log = print if rank == 0 else (lambda *a, **k: None)
    log(f"data: {source}: {len(train_set):,} train / {len(val_set):,} val tokens")

    model = llama.Llama(cfg, fused=not args.unfused)
    sharded = args.shard in ("zero2", "fsdp") and world > 1
    n_params = sum(p.numel() for p in model.parameters())
    if args.dtype == "bf16-pure":
        model.to(dg.bfloat16)
    if sharded:  # each block, then the root (its embedding, final norm and head): the optimizer sees the shards
        from dygrad.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=args.shard == "fsdp")
        fully_shard(model)
        dg.distributed.fsdp.register_fsdp_forward_method(model, "generate")  # it calls forward directly
    params = model.parameters()
    if args.dtype == "bf16-pure":
        params = [{"params": model.parameters(), "master_weights": True}]
    if args.shard == "zero1" and world > 1:
        optimizer = dg.distributed.optim.ZeroRedundancyOptimizer(params, dg.optim.AdamW, lr=args.lr,
                                                                 weight_decay=args.weight_decay)
    else:
        optimizer = dg.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    autocast = dg.autocast("cpu", dtype=dg.bfloat16, enabled=args.dtype == "bf16")
    train_model = model
    start = 0
    if args.resume and os.path.exists(checkpoint_path(args.out)):
        start = load_checkpoint(checkpoint_path(args.out), model, optimizer)
        log(f"resumed from {checkpoint_path(args.out)} at step {start}")
    recompute_plan = recompute_step = None
    recomputed_flops = 0.0
    if args.recompute != "none":  # before DDP wraps the model: the measured steps reduce nothing
        recompute_plan, costs, modes, recompute_step = setup_recompute(args, model, train_set, micro, log)
        recomputed_flops = costs.recomputed_flops(modes)
    if world > 1 and not sharded:  # after resuming: DDP broadcasts rank 0's parameters
        train_model = dg.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                                             gradient_as_bucket_view=args.gradient_as_bucket_view)
    # MFU's denominator: the measured GEMM peak of the dtype the GEMMs run in (bf16 under autocast and bf16-pure),
    # recorded with the CPU and its bf16 features beside every MFU figure (log lines and metrics.jsonl).
    peak_dtype = "float32" if args.dtype == "fp32" else "bfloat16"
    peak = measure_gemm_peak(getattr(dg, peak_dtype))
    cpu = profiler_metrics.cpu_description()
    flops_per_token = cfg.flops_per_token()
    log(f"model: {args.config} ({n_params / 1e6:.2f} M parameters, {'unfused' if args.unfused else 'fused'} ops), "
          f"batch {batch} x {seq}" + (f" x {args.grad_accum} micro-batches" if args.grad_accum > 1 else "")
          + ((f" split over {world} ranks" if split else f" x {world} ranks") if world > 1 else "")
          + f", threads {dg.get_context().num_threads}, measured "
          f"{peak_dtype} GEMM peak {peak / 1e9:.1f} GFLOP/s, dtype {args.dtype}; CPU {cpu}")
    if split:
        log(f"batch split: each step's {global_rows} rows drawn as one process draws them, {rows} per rank")

    # Weak scaling: each rank its own stream of batches (rank 0's is the single-process run's). --batch-split:
    # every rank draws the single process's batches and keeps its contiguous share of their rows.
    if split:
        loader = dgdata.DataLoader(train_set, global_rows, seed=args.seed, start_step=start, share=(rank, world))
    else:
        loader = dgdata.DataLoader(train_set, rows, seed=args.seed + 1_000_003 * rank, start_step=start)
    progress = Progress(args.steps, args.quiet)
    if rank == 0:
        dropped = repair_metrics(os.path.join(args.out, "metrics.jsonl"))
        if dropped:
            print(f"metrics.jsonl: dropped a cut last record ({dropped} bytes) left by an interrupted run",
                  file=sys.stderr)
    metrics = open(os.path.join(args.out, "metrics.jsonl"), "a") if rank == 0 else open(os.devnull, "w")
    first_loss = last_loss = None
    step_times = []
    prof = start_profiler(args, start, cfg, micro, seq, model, optimizer, peak) if args.profile else None
    # The loop never waits for the step it just issued: step i is reported after step i+1 has been enqueued,
    # so the host runs ahead of the stream and the device never idles while Python logs. A step's time is the
    # stream's own (docs/stream.md, "Timing marks"): a timing mark follows each step's last op (the optimizer's; its
    # loss alone needs only the forward), and a step lasts from the mark before it to its own, as the stream ran
    # them. The mark before a step is the previous step's, or one recorded where timing restarts: at the loop's
    # start, and after a checkpoint, an evaluation or a profiler report, whose time is left out. So a step's time is
    # never less than the time the stream spent running its ops (its busy time, recorded beside it), and in steady
    # state the step times add up to the run's time: the throughput it achieves.
    pending = None  # (step, loss, lr, data wait, start mark, end mark, left-out marks) of the step issued last

    def timing_mark():
        mark = dg.cpu.Event(enable_timing=True)
        mark.record()
        return mark

    start_mark = timing_mark()  # where the next step's time starts
    left_out = []  # (before, after) marks around a profiler report within the next step: its stream time is left out

    def restart_timing():
        nonlocal start_mark, left_out
        start_mark, left_out = timing_mark(), []

    def report(step, loss, lr, data_wait, start, end, gaps):
        nonlocal first_loss, last_loss
        last_loss = loss.float().item()
        dt = max((start.elapsed_time(end) - sum(a.elapsed_time(b) for a, b in gaps)) / 1000, 1e-9)
        busy = (start.device_time(end) - sum(a.device_time(b) for a, b in gaps)) / 1000
        step_times.append(dt)
        if first_loss is None:
            first_loss = last_loss
        tok_s = global_rows * seq / dt
        mfu = tok_s * flops_per_token / (peak * world)  # each rank measured the peak of its own threads
        record = {"step": step + 1, "loss": last_loss, "lr": lr, "step_time_s": dt, "tokens_per_s": tok_s,
                  "samples_per_s": (global_rows if split else rows) / dt, "mfu": mfu, "peak_flops_per_s": peak,
                  "peak_dtype": peak_dtype, "cpu": cpu, "data_wait_s": data_wait, "device_busy_s": busy,
                  "max_allocated_bytes": dg.memory.max_memory_allocated()}  # since the loop began
        if world > 1 and step + 1 == args.steps:  # the last step (reported at once, every rank): all ranks' peaks
            record["max_allocated_bytes_per_rank"] = peaks_of_ranks(world, rank)
        fields = [f"loss {last_loss:.4f}", f"{dt * 1000:.0f} ms/step", f"{tok_s:,.0f} tok/s", f"MFU {mfu:.1%}"]
        if recomputed_flops:  # HFU counts the recomputed FLOPs, MFU does not
            hfu = recompute_report.hfu_with_recompute(global_rows * seq * flops_per_token,
                                                      recomputed_flops * world, dt, peak * world)
            record["hfu"] = hfu
            fields.append(f"HFU {hfu:.1%}")
        if (step + 1) % args.eval_interval == 0 or step + 1 == args.steps:
            if rank == 0 or sharded:  # a sharded model's forward is a collective: every rank evaluates
                val_loss = evaluate(model, val_set, args.eval_batches, batch, args.seed)
        if rank == 0 and ((step + 1) % args.eval_interval == 0 or step + 1 == args.steps):
            record["val_loss"] = val_loss
            fields.append(f"val {record['val_loss']:.4f}")
            progress.update(step, fields, force_line=True)
        else:
            progress.update(step, fields)
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
        if (step + 1) % args.save_interval == 0 or step + 1 == args.steps:
            whole = checkpoint_state(model, optimizer)  # every rank: sharded state is gathered
            if rank == 0:
                save_checkpoint(checkpoint_path(args.out), whole, step + 1, args)

    failed_steps = []

    def report_or_skip(pending):
        # A step's deferred error (a data error found by a kernel: docs/async-errors.md) surfaces when its
        # loss is read. The failed step changed nothing it would have updated in place (parameters,
        # optimizer states); it is logged, then the run stops or goes on by --on-error.
        step = pending[0]
        try:
            report(*pending)
        except (RuntimeError, IndexError, ValueError, TypeError) as e:
            restart_timing()
            failed_steps.append(step + 1)
            metrics.write(json.dumps({"step": step + 1, "error": str(e), "skipped": args.on_error == "skip"}) + "\n")
            metrics.flush()
            progress.newline()
            print(f"step {step + 1} failed: {e}", file=sys.stderr)
            if args.on_error == "stop":
                raise

    def train_step(x, y):
        if args.grad_accum > 1:
            return accumulated_step(x, y)
        with autocast:
            loss = train_model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def accumulated_step(x, y):
        # grad_accum micro-batches of `batch` rows: each loss scaled by 1/grad_accum, so the gradients sum to the
        # mean over all rows (the whole batch's, up to float rounding); DDP reduces only after the last one
        optimizer.zero_grad(set_to_none=True)
        total = None
        for i in range(args.grad_accum):
            rows_i = slice(i * micro, (i + 1) * micro)
            last = i == args.grad_accum - 1
            with (train_model.no_sync() if world > 1 and not sharded and not last else contextlib.nullcontext()):
                with autocast:
                    loss = train_model(x[rows_i], y[rows_i])
                (loss / args.grad_accum).backward()
            total = loss.detach() if total is None else total + loss.detach()
        optimizer.step()
        return total / args.grad_accum

    run_step = dg.jit(train_step, jit_level=args.jit_level) if args.jit else train_step
    dg.memory.reset_peak_memory_stats()  # metrics' max_allocated_bytes: the training steps' peak
    try:
        for step in range(start, args.steps):
            x, y = next(loader)
            if step + 1 == args.inject_bad_step:
                x = x.clone()
                x[0, 0] = 10**6  # a token id out of the vocabulary: the embedding kernel fails, deferred
            lr = lr_at(step, args)
            for g in optimizer.param_groups:
                g["lr"] = lr
            loss = run_step(x, y)
            if split:  # the global batch's loss: the mean of the ranks' (equal shares), as one process computes it
                loss = mean_over_ranks(loss, world)
            end_mark = timing_mark()
            issued = (step, loss, lr, loader.last_wait, start_mark, end_mark, left_out)
            start_mark, left_out = end_mark, []
            if pending is not None:
                report_or_skip(pending)
            pending = issued
            if prof is not None:
                # prof.step() may stop a profiling cycle and write its report: not part of any step. What the
                # stream spent waiting for it (between marks around it) is left out of the next step's time.
                before = timing_mark()
                prof.step()
                left_out.append((before, timing_mark()))
            done = step + 1
            if done == args.steps or done % args.save_interval == 0 or done % args.eval_interval == 0:
                # A checkpoint or an evaluation follows this step: report it now (both sync anyway, and
                # neither may see the next step's update); the next step is timed from their end.
                report_or_skip(pending)
                pending = None
                restart_timing()
            if args.halt_after is not None and done - start >= args.halt_after:
                pending = None  # stop as a crash would: the unreported step is lost
                break
        if pending is not None:
            report_or_skip(pending)
    finally:
        if prof is not None:
            prof.stop()
        loader.close()
        metrics.close()
        progress.newline()
    if prof is not None:
        finish_profiler(prof, args)
    if failed_steps:
        log(f"skipped {len(failed_steps)} failed step(s): {failed_steps}")
    if recompute_plan is not None:
        from dygrad.utils.checkpoint import _timed_step
        optimizer.zero_grad(set_to_none=True)
        measured_peak, measured_time = _timed_step(model, recompute_step)  # the plan's own measure, after the run
        log(recompute_plan.report(measured_peak, measured_time))
        optimizer.zero_grad(set_to_none=True)
    if step_times and last_loss is not None:
        med = float(np.median(step_times[1:] if len(step_times) > 1 else step_times))
        log(f"done: loss {first_loss:.4f} -> {last_loss:.4f}; median step {med * 1000:.0f} ms, "
            f"{global_rows * seq / med:,.0f} tok/s, MFU {rows * seq / med * flops_per_token / peak:.1%} of the "
            f"measured {peak_dtype} GEMM peak ({peak / 1e9:.1f} GFLOP/s; CPU {cpu})")
    if args.sample_tokens > 0:
        tok = dgdata.ByteTokenizer()
        idx = dg.tensor(tok.encode(args.prompt).astype(np.int64)).view(1, -1)
        out = model.generate(idx, args.sample_tokens, temperature=0.8)
        log("sample:", tok.decode(out[0].tolist()))
    if world > 1:
        # The ranks leave together: rank 0's last evaluation and checkpoint make it the last to reach the exit, and a
        # rank more than a second ahead of the others leaves MPI unfinalized (docs/distributed.md, "The training CLI")
        dg.distributed.barrier()
        dg.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
