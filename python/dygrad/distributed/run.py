"""`python3 -m dygrad.distributed.run --nproc-per-node N script.py ARGS`: torchrun's command line, launching the
ranks with OpenMPI's mpirun (docs/distributed.md). Each rank gets RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE (dygrad.distributed exports them from OpenMPI's variables) and cores / ranks threads.

    python3 -m dygrad.distributed.run --nproc-per-node 2 train.py --steps 10
    python3 -m dygrad.distributed.run --nproc-per-node 2 -m dygrad.train --steps 10

Its exit status is the first failing rank's, as mpirun's and torchrun's (OpenMPI's --enable-recovery, which lets
the surviving ranks name a dead one, would report 0).
"""
import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile


def mpirun_command(nproc, program, args, module=False, python=None):
    """The command that starts `nproc` ranks of `program` on this machine and exits with the first failing rank's
    status: this launcher (`python3 -m dygrad.distributed.run`), which runs mpirun."""
    return ([python or sys.executable, "-m", "dygrad.distributed.run", "--nproc-per-node", str(nproc)] +
            (["--python", python] if python else []) + (["-m"] if module else []) + [program] + list(args))


def mpirun_prefix(nproc):
    """mpirun and its options for `nproc` ranks on this machine; the rank's command line follows."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("dygrad.distributed.run: mpirun not found (install openmpi-bin; 'make deps' does)")
    command = [mpirun, "-n", str(nproc), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")  # containers and CI machines run as root
    # init_process_group starts MPI with dygrad's OpenMPI settings (MPI_DEFAULTS: yield when idle, ...).
    # --enable-recovery: when a rank dies, mpirun lets the others run, and they raise an error naming it
    # (docs/distributed.md) instead of being killed. It also makes mpirun exit 0 whatever the ranks' statuses
    # (OpenMPI 4.1), so each rank runs under a shell that writes its status for the launcher (rank_command).
    command += ["--enable-recovery"]
    return command


def rank_command(status_dir, argv):
    """A rank's command line: argv under a shell that writes "STATUS NANOSECONDS" to status_dir/rank<R> when it
    ends (128 + N when a signal N killed it), then exits with the same status."""
    script = ('"$@"; s=$?; r=${OMPI_COMM_WORLD_RANK:-0}; d=' + shlex.quote(status_dir) +
              '; printf "%s %s\\n" "$s" "$(date +%s%N)" > "$d/rank$r.tmp" && mv "$d/rank$r.tmp" "$d/rank$r"; exit $s')
    return ["/bin/sh", "-c", script, "rank"] + list(argv)


def exit_status(nproc, status_dir, mpirun_status):
    """The launcher's status: the first failing rank's (by the time it ended), else mpirun's own when it failed
    or a rank wrote none (its shell was killed), else 0. Names the failing rank on stderr."""
    ended, missing = [], []
    for r in range(nproc):
        try:
            with open(os.path.join(status_dir, f"rank{r}")) as f:
                status, when = f.read().split()
            ended.append((int(when), r, int(status)))
        except (OSError, ValueError):
            missing.append(r)
    failed = sorted(e for e in ended if e[2] != 0)
    if failed:
        _, rank, status = failed[0]
        others = f" ({len(failed) - 1} other rank(s) failed after it)" if len(failed) > 1 else ""
        print(f"dygrad.distributed.run: rank {rank} exited with status {status}, the first to fail{others}",
              file=sys.stderr)
        return status
    if missing:
        print(f"dygrad.distributed.run: rank(s) {', '.join(map(str, missing))} ended without an exit status "
              f"(mpirun exited with {mpirun_status})", file=sys.stderr)
        return mpirun_status or 1
    return mpirun_status


def launch(nproc, program, args, module=False, python=None):
    """Runs `nproc` ranks of `program` under mpirun and returns the first failing rank's exit status (0 when all
    succeeded). SIGINT, SIGTERM and SIGHUP sent to the launcher are passed on to mpirun."""
    with tempfile.TemporaryDirectory(prefix="dygrad-ranks-") as status_dir:
        argv = [python or sys.executable] + (["-m"] if module else []) + [program] + list(args)
        process = subprocess.Popen(mpirun_prefix(nproc) + rank_command(status_dir, argv))
        forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {sig: signal.signal(sig, lambda sig, _: process.send_signal(sig)) for sig in forwarded}
        try:
            status = process.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return exit_status(nproc, status_dir, status if status >= 0 else 128 - status)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m dygrad.distributed.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, help="ranks to start (default 1)")
    p.add_argument("--nnodes", default="1", help="only 1: one machine (several machines: call mpirun with a hostfile)")
    p.add_argument("--standalone", action="store_true", help="accepted (torchrun's flag); always standalone")
    p.add_argument("--python", default=None, help="the interpreter of the ranks (default: this one)")
    p.add_argument("-m", "--module", action="store_true", help="run the program as a module (python -m)")
    p.add_argument("program")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if str(a.nnodes) not in ("1", "1:1"):
        raise SystemExit("dygrad.distributed.run: one node only; for several machines run mpirun with a hostfile")
    if a.nproc_per_node < 1:
        raise SystemExit("dygrad.distributed.run: --nproc-per-node must be at least 1")
    sys.exit(launch(a.nproc_per_node, a.program, a.args, module=a.module, python=a.python))


if __name__ == "__main__":
    main()
