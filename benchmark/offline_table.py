"""ArCHer's Table 1 (App. D.1) at small scale: the offline ArCHer variants and (filtered) BC on one
dataset.

    python benchmark/offline_table.py  # 6 rows, seeds 1-2 (REINFORCE rows: seed 1), ~15 min
    python benchmark/report.py         # -> benchmark/results/offline.md

writes data/offline_table_<episodes>.jsonl (scripted 10-word Twenty Questions, seed 0) unless it
exists and runs every variant for each seed into runs/benchmark/offline/<row>/seed<k>/ (finished
runs are skipped; --jobs at once). BC and filtered BC get as many gradient steps as ArCHer's actor.
report.py makes the table (sampled return, mean ± std over seeds) next to the paper's numbers."""

import argparse
import os
import shlex
import subprocess
import sys

from online import find_run, run_pool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# key -> (row label, script, flags, the paper's Table 1 return on Twenty Questions)
VARIANTS = {
    "iql_awr": (
        "ArCHer (IQL + AWR)",
        "archer_offline.py",
        ["--critic-loss", "iql", "--actor-loss", "awr"],
        -14.1,
    ),
    "iql_reinforce": (
        "ArCHer (IQL + REINFORCE)",
        "archer_offline.py",
        ["--critic-loss", "iql", "--actor-loss", "reinforce"],
        -20.0,
    ),
    "iql_reinforce_bc": (
        "ArCHer (IQL + REINFORCE + BC)",
        "archer_offline.py",
        ["--critic-loss", "iql", "--actor-loss", "reinforce_bc"],
        -15.3,
    ),
    "sarsa_awr": (
        "ArCHer (SARSA + AWR)",
        "archer_offline.py",
        ["--critic-loss", "sarsa", "--actor-loss", "awr"],
        -14.5,
    ),
    "filtered_bc": ("Filtered BC (ρ 0.1)", "filtered_bc.py", ["--offline-rho", "0.1"], -15.4),
    "bc": ("BC (ρ 1.0)", "filtered_bc.py", ["--offline-rho", "1.0"], -16.8),
}


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=1000, help="scripted episodes in the dataset")
    p.add_argument("--iterations", type=int, default=20, help="archer_offline.py iterations")
    p.add_argument(
        "--updates-per-iter", type=int, default=20, help="critic and actor steps per iteration"
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument(
        "--reinforce-seeds",
        type=int,
        nargs="+",
        default=[1],
        help="seeds of the two REINFORCE rows "
        "(slow on CPU: once they collapse every sample is 32 tokens)",
    )
    p.add_argument(
        "--rows",
        nargs="+",
        default=list(VARIANTS),
        choices=list(VARIANTS),
        help="which rows to run",
    )
    p.add_argument("--jobs", type=int, default=2, help="runs at once")
    p.add_argument(
        "--out",
        default=os.path.join(ROOT, "runs", "benchmark", "offline"),
        help="where the runs go",
    )
    p.add_argument("--actor", default="tiny", help="actor for every row (tiny, gpt2, a path, ...)")
    p.add_argument(
        "--critic",
        default="tiny",
        help="critic of the ArCHer rows (tiny, minilm, roberta-base, ...)",
    )
    p.add_argument(
        "--archer-extra",
        default="",
        help="flags for the ArCHer rows only, e.g. '--actor-lr 1e-4 --critic-lr 1e-5'",
    )
    p.add_argument(
        "--bc-lr", type=float, default=1e-3, help="learning rate of the BC / filtered BC rows"
    )
    p.add_argument("--extra", default="", help="flags for every run, e.g. '--device cuda'")
    a = p.parse_args()
    a.out = os.path.abspath(a.out)
    data = os.path.join(ROOT, "data", f"offline_table_{a.episodes}.jsonl")
    if not os.path.exists(data):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "envs.collect",
                "--env",
                "twenty_questions_subset",
                "--episodes",
                str(a.episodes),
                "--seed",
                "0",
                "--out",
                data,
            ],
            cwd=ROOT,
            check=True,
        )
    steps = a.iterations * a.updates_per_iter  # BC gets as many actor steps as ArCHer
    common = [
        "--actor",
        a.actor,
        "--dataset",
        data,
        "--batch-size",
        str(a.batch_size),
        "--micro-batch-size",
        str(a.batch_size),
        "--eval-episodes",
        str(a.eval_episodes),
        "--checkpoint-every",
        "0",
    ]
    jobs = []
    for seed in a.seeds:
        for key in a.rows:
            _, script, flags, _ = VARIANTS[key]
            if key.startswith("iql_reinforce") and seed not in a.reinforce_seeds:
                continue
            out = os.path.join(a.out, key, f"seed{seed}")
            if find_run(out) is not None:
                continue
            if script == "archer_offline.py":
                cmd = (
                    flags
                    + [
                        "--iterations",
                        str(a.iterations),
                        "--critic-updates-per-iter",
                        str(a.updates_per_iter),
                        "--actor-updates-per-iter",
                        str(a.updates_per_iter),
                        "--eval-every",
                        "0",
                        "--critic",
                        a.critic,
                    ]
                    + shlex.split(a.archer_extra)
                )
            else:
                cmd = flags + [
                    "--iterations",
                    "0",
                    "--offline-steps",
                    str(steps),
                    "--offline-lr",
                    str(a.bc_lr),
                ]
            cmd = (
                [sys.executable, script, "--seed", str(seed), "--output-dir", out]
                + common
                + cmd
                + shlex.split(a.extra)
            )
            jobs.append((f"{key} seed {seed}", out, cmd))
    failed = run_pool(jobs, a.jobs, max(1, (os.cpu_count() or 2) // a.jobs))
    print(
        f"offline table: {len(jobs) - len(failed)} runs done, {len(failed)} failed; "
        "now: python benchmark/report.py"
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
