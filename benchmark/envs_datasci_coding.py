"""Measure the datasci_coding env: scripted policies, template quality, sandbox overhead.

    OMP_NUM_THREADS=1 python benchmark/envs_datasci_coding.py --episodes 100 --out results.json

Prints (and writes as JSON) for each scripted mode the mean return, success rate, mean attempts and
env steps per second over ``--episodes`` episodes (episode i reset with seed i), each runnable
template's mean ROC AUC per dataset (``--templates``), and the time one program takes in the bwrap
sandbox and in a plain subprocess (median of ``--repeats`` runs of the same two programs: one that
fails at once, one that imports scikit-learn and fits logistic regression).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import envs  # noqa: E402
from envs import datasci_coding as dc  # noqa: E402


def policies(episodes: int) -> dict:
    out = {}
    for mode in dc.MODES:
        start = time.perf_counter()
        trajs = envs.collect_scripted("datasci_coding", episodes, seed=0, mode=mode)
        seconds = time.perf_counter() - start
        s = envs.summarize(trajs)
        steps = sum(len(t["steps"]) for t in trajs)
        aucs = [t["steps"][-1]["reward"] for t in trajs if t["success"]]
        out[mode] = {
            **s,
            "mean_auc_when_run": statistics.mean(aucs) if aucs else None,
            "env_steps_per_s": steps / seconds,
            "seconds_per_step": seconds / steps,
        }
        print(
            f"{mode:>10}: return {s['mean_return']:+.3f}  success {s['success_rate']:.3f}  "
            f"attempts {s['mean_turns']:.2f}  AUC|run {out[mode]['mean_auc_when_run']:.3f}  "
            f"{steps / seconds:.2f} steps/s",
            flush=True,
        )
    return out


def templates() -> dict:
    env = envs.make("datasci_coding")
    table = {}
    for name, body in dc.RUNNABLE.items():
        row = {}
        for target in dc.TARGETS:
            env.reset(seed=0, options={"target": target})
            row[target] = env.evaluate(body)["auc"]
        table[name] = row
        print(
            f"{name:>20}: "
            + " ".join(f"{row[t]:.3f}" for t in dc.TARGETS)
            + f"  mean {statistics.mean(row.values()):.3f}",
            flush=True,
        )
    return table


def overhead(repeats: int) -> dict:
    programs = {"fails at once": "model = (", "logistic regression": dc.GOOD["logistic_regression"]}
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        boxes = {
            mode: envs.make("datasci_coding", sandbox=mode, allow_unsandboxed=True)
            for mode in ("bwrap", "subprocess")
        }
    for label, program in programs.items():
        for mode, env in boxes.items():
            times = []
            for i in range(repeats):
                env.reset(seed=i, options={"target": "breast_cancer"})
                start = time.perf_counter()
                env.step(program)
                times.append(time.perf_counter() - start)
            out[f"{label} / {mode}"] = statistics.median(times)
        wrapped, plain = out[f"{label} / bwrap"], out[f"{label} / subprocess"]
        print(
            f"{label:>20}: bwrap {wrapped:.3f} s, subprocess {plain:.3f} s, "
            f"bwrap overhead {(wrapped - plain) * 1000:+.0f} ms",
            flush=True,
        )
    return out


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--templates", action="store_true", help="also score every runnable template")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    result = {"sandbox": dc.choose_sandbox(), "bwrap": dc.bwrap_status()}
    print(f"sandbox: {result['sandbox']}", flush=True)
    result["overhead"] = overhead(args.repeats)
    if args.templates:
        result["templates"] = templates()
    result["policies"] = policies(args.episodes)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
