"""The port programs (tests/python/port/) side by side: each run with torch and with dygrad through
`python3 -m dygrad.as_torch`, interleaved round by round, from the same initial weights; prints each
framework's median tokens/s (rows/s for the tabular program) and the ratio dygrad / torch eager.

    python3 bench/port_programs.py [--rounds 5] [--steps 50] [--threads N] [PROGRAM ...]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

PORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python", "port")
PROGRAMS = ("gpt2_train.py", "llama_train.py", "tabular_classify.py", "llama_complex_generate.py", "transformer_lm.py",
            "gpt2_einops.py")


def run(argv, threads):
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    result = subprocess.run(argv, capture_output=True, text=True, cwd=PORT, env=env)
    match = re.search(r"^tokens/s (\S+)", result.stdout, re.M)
    if result.returncode != 0 or not match:
        return None, (result.stderr.strip().splitlines() or ["no output"])[-1]
    return float(match.group(1)), None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("programs", nargs="*", default=PROGRAMS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for both (0: their defaults)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for program in args.programs:
            init = os.path.join(tmp, program + ".init.pt")
            common = [os.path.join(PORT, program), "--steps", str(args.steps)]
            rates = {"torch": [], "dygrad": []}
            error = None
            for r in range(args.rounds):
                torch_argv = [sys.executable, *common] + (["--save-init", init] if r == 0 else ["--init-from", init])
                rate, err = run(torch_argv, args.threads)
                if rate is None:
                    sys.exit(f"{program}: torch run failed: {err}")
                rates["torch"].append(rate)
                rate, error = run([sys.executable, "-m", "dygrad.as_torch", *common, "--init-from", init], args.threads)
                if rate is None:
                    break
                rates["dygrad"].append(rate)
            t = statistics.median(rates["torch"])
            if error is not None:
                print(f"{program:22s} torch {t:10.1f}/s   dygrad stopped: {error}")
                continue
            d = statistics.median(rates["dygrad"])
            print(f"{program:22s} torch {t:10.1f}/s   dygrad {d:10.1f}/s   ratio {d / t:.2f} "
                  f"(median of {args.rounds} interleaved rounds, {args.steps} steps)")


if __name__ == "__main__":
    main()
