"""Seconds per training iteration per algorithm, each script run through its own command line.

    python benchmark/timing.py                    # every method below, a few minutes on 2 cores
    python benchmark/timing.py --methods archer chai
    python benchmark/report.py                    # -> benchmark/results/timing.{csv,md}

Every online script runs --iterations iterations from the BC actor of benchmark/online.py (else the
untrained tiny actor; --actor to choose), without evaluations in between (archer.py without warm-up,
so every iteration has its actor steps), and archer_offline.py as many, one run at a time with all
cores, into <out>/timing/<method>/seed1/ (--extra adds flags to every run, e.g. "--device cuda").
A finished run is skipped. report.py turns each run's TensorBoard logs into seconds per iteration
(the median gap between consecutive iterations); this prints the median charts/iteration_time_s of
each run's summary.json. This was the second half of benchmark/throughput.py; the first half, the
rollout path against bare `generate`, needs the scripts' internals: experiments/throughput.py."""

import argparse
import json
import os
import shlex
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from online import find_run, run_pool  # noqa: E402  (benchmark/online.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = {  # method -> (script, flags)
    "archer": ("archer.py", ["--bc-steps", "0", "--warmup-iters", "0"]),
    "archer_baseline": ("archer.py", ["--bc-steps", "0", "--warmup-iters", "0", "--use-baseline"]),
    "chai": ("chai.py", ["--bc-steps", "0"]),
    "filtered_bc": ("filtered_bc.py", ["--offline-steps", "0"]),
    "ppo_token": ("ppo_token.py", ["--bc-steps", "0"]),
    "archer_offline": ("archer_offline.py", ["--scripted-episodes", "1000"]),
    "qsft": ("qsft.py", ["--bc-steps", "0"]),
}


def default_actor():
    """(actor, label): benchmark/online.py's BC actor if it was trained, else the tiny one."""
    bc = find_run(os.path.join(ROOT, "runs", "benchmark", "online", "bc"))
    if bc is None:
        return "tiny", "tiny (untrained)"
    summary = json.load(open(os.path.join(bc, "summary.json")))
    return os.path.join(bc, "actor"), f"{summary['args']['actor']} (BC)"


def command(method, actor, env, iterations, out):
    """The command line of one timing run of `method` (a TIMING key)."""
    script, flags = TIMING[method]
    cmd = [sys.executable, script, *flags, "--actor", actor, "--env", env]
    cmd += ["--iterations", str(iterations), "--eval-every", "0", "--eval-episodes", "8"]
    return cmd + ["--checkpoint-every", "0", "--seed", "1", "--output-dir", out]


def seconds_per_iteration(run):
    """The median charts/iteration_time_s of a finished run's summary.json history."""
    history = json.load(open(os.path.join(run, "summary.json")))["history"]
    times = [h["charts/iteration_time_s"] for h in history if "charts/iteration_time_s" in h]
    return statistics.median(times) if times else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--methods", nargs="+", default=list(TIMING), choices=list(TIMING))
    p.add_argument("--env", default="twenty_questions_subset")
    p.add_argument("--actor", default="", help="actor to time (default: online.py's BC actor)")
    p.add_argument("--iterations", type=int, default=4, help="iterations per run")
    p.add_argument("--extra", default="", help="flags added to every run (last, so they win)")
    p.add_argument(
        "--out", default=os.path.join(ROOT, "runs", "benchmark"), help="benchmark runs folder"
    )
    a = p.parse_args(argv)
    actor = a.actor or default_actor()[0]
    jobs = []
    for method in a.methods:
        out = os.path.join(os.path.abspath(a.out), "timing", method, "seed1")
        if find_run(out) is None:
            cmd = command(method, actor, a.env, a.iterations, out) + shlex.split(a.extra)
            jobs.append((method, out, cmd))
    failed = run_pool(jobs, 1, os.cpu_count() or 2)
    for method in a.methods:
        run = find_run(os.path.join(os.path.abspath(a.out), "timing", method, "seed1"))
        if run is not None:
            print(f"{method:16s} {seconds_per_iteration(run):.2f} s per iteration ({run})")
    if failed:
        sys.exit(1)
    print("now: python benchmark/report.py")


if __name__ == "__main__":
    main()
