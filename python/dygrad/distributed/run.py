"""`python3 -m dygrad.distributed.run --nproc-per-node N script.py ARGS`: torchrun's command line, launching the
ranks with OpenMPI's mpirun (docs/distributed.md). Each rank gets RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE (dygrad.distributed exports them from OpenMPI's variables) and cores / ranks threads.

    python3 -m dygrad.distributed.run --nproc-per-node 2 train.py --steps 10
    python3 -m dygrad.distributed.run --nproc-per-node 2 -m dygrad.train --steps 10

Its exit status is the first failing rank's, as mpirun's and torchrun's (OpenMPI's --enable-recovery, which lets
the surviving ranks name a dead one, would report 0).

Several machines (docs/distributed.md "Across hosts"): `--nnodes 2 --hosts a,b` (or `--hostfile FILE`) starts
--nproc-per-node ranks on each; mpirun reaches the other machines with ssh (or `--rsh-agent`), and `--mca KEY=VALUE`
passes OpenMPI settings (e.g. `btl=self,tcp`, `btl_tcp_if_include=eth0`). Each rank's status is written where the
launcher reads it when the machines share the file system; otherwise its exit status is mpirun's.
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


def mpirun_prefix(nproc, hosts=None, hostfile=None, rsh_agent=None, mca=()):
    """mpirun and its options for `nproc` ranks on this machine (or on `hosts`, "name:slots" each, or a hostfile's);
    the rank's command line follows."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("dygrad.distributed.run: mpirun not found (install openmpi-bin; 'make deps' does)")
    command = [mpirun, "-n", str(nproc), "--oversubscribe", "--bind-to", "none"]
    if hosts:
        command += ["-H", ",".join(hosts)]
    if hostfile:
        command += ["--hostfile", hostfile]
    if rsh_agent:
        command += ["--mca", "plm_rsh_agent", rsh_agent]
    for setting in mca:
        key, _, value = setting.partition("=")
        if not key or not value:
            raise SystemExit(f"dygrad.distributed.run: --mca takes KEY=VALUE, got {setting!r}")
        command += ["--mca", key, value]
    if hosts or hostfile:  # the ranks' environment on the other machines: this one's Python setup
        for name in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "DYGRAD_MEMORY_LIMIT"):
            if name in os.environ:
                command += ["-x", name]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")  # containers and CI machines run as root
    # init_process_group starts MPI with dygrad's OpenMPI settings (MPI_DEFAULTS: yield when idle, ...).
    # --enable-recovery: when a rank dies, mpirun lets the others run, and they raise an error naming it
    # (docs/distributed.md) instead of being killed. It also makes mpirun exit 0 whatever the ranks' statuses
    # (OpenMPI 4.1), so each rank runs under a shell that writes its status for the launcher (rank_command).
    if not (hosts or hostfile):  # several machines: mpirun's own status (their ranks' files may not be readable here)
        command += ["--enable-recovery"]
    return command


def rank_command(status_dir, argv):
    """A rank's command line: argv under a shell that writes "STATUS NANOSECONDS" to status_dir/rank<R> when it
    ends (128 + N when a signal N killed it), then exits with the same status."""
    script = ('"$@"; s=$?; r=${OMPI_COMM_WORLD_RANK:-0}; d=' + shlex.quote(status_dir) +
              '; [ -d "$d" ] && printf "%s %s\\n" "$s" "$(date +%s%N)" > "$d/rank$r.tmp" && mv "$d/rank$r.tmp" '
              '"$d/rank$r"; exit $s')
    return ["/bin/sh", "-c", script, "rank"] + list(argv)


def exit_status(nproc, status_dir, mpirun_status, several_machines=False):
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
    if missing and several_machines:  # a rank on another machine wrote its status there: mpirun's tells
        return mpirun_status
    if missing:
        print(f"dygrad.distributed.run: rank(s) {', '.join(map(str, missing))} ended without an exit status "
              f"(mpirun exited with {mpirun_status})", file=sys.stderr)
        return mpirun_status or 1
    return mpirun_status


def launch(nproc, program, args, module=False, python=None, **where):
    """Runs `nproc` ranks of `program` under mpirun and returns the first failing rank's exit status (0 when all
    succeeded). SIGINT, SIGTERM and SIGHUP sent to the launcher are passed on to mpirun. `where`: mpirun_prefix's
    hosts, hostfile, rsh_agent and mca."""
    with tempfile.TemporaryDirectory(prefix="dygrad-ranks-") as status_dir:
        argv = [python or sys.executable] + (["-m"] if module else []) + [program] + list(args)
        process = subprocess.Popen(mpirun_prefix(nproc, **where) + rank_command(status_dir, argv))
        forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {sig: signal.signal(sig, lambda sig, _: process.send_signal(sig)) for sig in forwarded}
        try:
            status = process.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return exit_status(nproc, status_dir, status if status >= 0 else 128 - status,
                           several_machines=bool(where.get("hosts") or where.get("hostfile")))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m dygrad.distributed.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, help="ranks to start (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="machines (with --hosts or --hostfile when more than 1)")
    p.add_argument("--hosts", default=None, help="the machines, comma-separated (mpirun -H), --nproc-per-node each")
    p.add_argument("--hostfile", default=None, help="an OpenMPI hostfile (its slots decide the ranks per machine)")
    p.add_argument("--rsh-agent", default=None, help="what starts mpirun's daemons on the other machines (ssh)")
    p.add_argument("--mca", action="append", default=[], metavar="KEY=VALUE", help="an OpenMPI setting (repeatable)")
    p.add_argument("--standalone", action="store_true", help="accepted (torchrun's flag); always standalone")
    p.add_argument("--python", default=None, help="the interpreter of the ranks (default: this one)")
    p.add_argument("-m", "--module", action="store_true", help="run the program as a module (python -m)")
    p.add_argument("program")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.nproc_per_node < 1 or a.nnodes < 1:
        raise SystemExit("dygrad.distributed.run: --nproc-per-node and --nnodes must be at least 1")
    hosts = [h for h in (a.hosts or "").split(",") if h]
    if a.nnodes > 1 and not hosts and not a.hostfile:
        raise SystemExit("dygrad.distributed.run: --nnodes above 1 needs --hosts or --hostfile (docs/distributed.md, "
                         "\"Across hosts\")")
    if hosts and len(hosts) != a.nnodes:
        raise SystemExit(f"dygrad.distributed.run: --hosts names {len(hosts)} machines for --nnodes {a.nnodes}")
    where = {"hosts": [f"{h}:{a.nproc_per_node}" for h in hosts] or None, "hostfile": a.hostfile,
             "rsh_agent": a.rsh_agent, "mca": a.mca}
    sys.exit(launch(a.nproc_per_node * a.nnodes, a.program, a.args, module=a.module, python=a.python, **where))


if __name__ == "__main__":
    main()
