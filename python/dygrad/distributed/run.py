"""`python3 -m dygrad.distributed.run --nproc-per-node N script.py ARGS`: torchrun's command line, launching the
ranks with OpenMPI's mpirun (docs/distributed.md). Each rank gets RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE (dygrad.distributed exports them from OpenMPI's variables) and cores / ranks threads.

    python3 -m dygrad.distributed.run --nproc-per-node 2 train.py --steps 10
    python3 -m dygrad.distributed.run --nproc-per-node 2 -m dygrad.train --steps 10
"""
import argparse
import os
import shutil
import sys


def mpirun_command(nproc, program, args, module=False, python=None):
    """The mpirun command line that starts `nproc` ranks of `program` on this machine."""
    return mpirun_prefix(nproc) + [python or sys.executable] + (["-m"] if module else []) + [program] + list(args)


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
    # (docs/distributed.md) instead of being killed.
    command += ["--enable-recovery"]
    return command


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m dygrad.distributed.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, help="ranks to start (default 1)")
    p.add_argument("--nnodes", default="1", help="only 1: one machine (several machines: call mpirun with a hostfile)")
    p.add_argument("--standalone", action="store_true", help="accepted (torchrun's flag); always standalone")
    p.add_argument("-m", "--module", action="store_true", help="run the program as a module (python -m)")
    p.add_argument("program")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if str(a.nnodes) not in ("1", "1:1"):
        raise SystemExit("dygrad.distributed.run: one node only; for several machines run mpirun with a hostfile")
    if a.nproc_per_node < 1:
        raise SystemExit("dygrad.distributed.run: --nproc-per-node must be at least 1")
    command = mpirun_command(a.nproc_per_node, a.program, a.args, module=a.module)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
