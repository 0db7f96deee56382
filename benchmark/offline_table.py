"""ArCHer's Table 1 (App. D.1) at small scale: the offline ArCHer variants and (filtered) BC on one dataset.

    python benchmark/offline_table.py --episodes 1000 --iterations 20 --seeds 1

writes data/offline_table_<episodes>.jsonl (scripted 10-word Twenty Questions, seed 0) unless it exists, runs
every variant for each seed (one process at a time) and prints a Markdown table of the final evaluation returns
(sampled; mean ± std over seeds). Extra arguments after `--` go to every archer_offline.py run."""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = [  # (row, script, flags)
    ("ArCHer (IQL + AWR)", "archer_offline.py", ["--critic-loss", "iql", "--actor-loss", "awr"]),
    ("ArCHer (IQL + REINFORCE)", "archer_offline.py", ["--critic-loss", "iql", "--actor-loss", "reinforce"]),
    ("ArCHer (IQL + REINFORCE + BC)", "archer_offline.py", ["--critic-loss", "iql", "--actor-loss", "reinforce_bc"]),
    ("ArCHer (SARSA + AWR)", "archer_offline.py", ["--critic-loss", "sarsa", "--actor-loss", "awr"]),
    ("Filtered BC (ρ 0.1)", "filtered_bc.py", ["--offline-rho", "0.1"]),
    ("BC (ρ 1.0)", "filtered_bc.py", ["--offline-rho", "1.0"]),
]
PAPER = [-14.1, -20, -15.3, -14.5, -15.4, -16.8]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=1000, help="scripted episodes in the dataset")
    p.add_argument("--iterations", type=int, default=20, help="archer_offline.py iterations")
    p.add_argument("--updates-per-iter", type=int, default=20, help="critic and actor steps per iteration")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--rows", type=int, nargs="+", default=list(range(len(VARIANTS))), help="which rows (0-5) to run")
    p.add_argument("--out", default="runs/offline_table")
    p.add_argument("extra", nargs="*", help="flags for archer_offline.py (after --)")
    a = p.parse_args()
    data = os.path.join(ROOT, "data", f"offline_table_{a.episodes}.jsonl")
    if not os.path.exists(data):
        subprocess.run([sys.executable, "-m", "envs.collect", "--env", "twenty_questions_subset", "--episodes",
                        str(a.episodes), "--seed", "0", "--out", data], cwd=ROOT, check=True)
    steps = a.iterations * a.updates_per_iter  # BC gets as many actor steps as ArCHer
    common = ["--dataset", data, "--batch-size", str(a.batch_size), "--micro-batch-size", str(a.batch_size),
              "--eval-episodes", str(a.eval_episodes), "--checkpoint-every", "0", "--device", "cpu"]
    results = {}
    for seed in a.seeds:
        for k, (row, script, flags) in enumerate(VARIANTS):
            if k not in a.rows:
                continue
            out = os.path.join(a.out, f"seed{seed}_row{k}")
            if script == "archer_offline.py":
                cmd = flags + ["--iterations", str(a.iterations), "--critic-updates-per-iter", str(a.updates_per_iter),
                               "--actor-updates-per-iter", str(a.updates_per_iter), "--eval-every", "0"] + a.extra
            else:
                cmd = flags + ["--iterations", "0", "--offline-steps", str(steps), "--offline-lr", "1e-3"]
            cmd = [sys.executable, script, "--seed", str(seed), "--output-dir", out] + common + cmd
            print(" ".join(cmd[1:]), flush=True)
            subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            (run,) = os.listdir(out)
            s = json.load(open(os.path.join(out, run, "summary.json")))
            results.setdefault(row, []).append((s["eval_return"], s["eval_success_rate"], s["eval_return_greedy"]))
            print(f"  {row} seed {seed}: return {s['eval_return']:.2f} success {s['eval_success_rate']:.2f} "
                  f"(greedy {s['eval_return_greedy']:.2f}) {s['wall_time_s']:.0f}s", flush=True)
    print(f"\n| method | return (sampled) | success | return (greedy) | paper (20Q) |\n|---|---|---|---|---|")
    for (row, _, _), paper in zip(VARIANTS, PAPER):
        if row not in results:
            continue
        r = results[row]
        mean = lambda i: sum(x[i] for x in r) / len(r)  # noqa: E731
        std = (sum((x[0] - mean(0)) ** 2 for x in r) / max(1, len(r) - 1)) ** 0.5
        print(f"| {row} | {mean(0):.2f}" + (f" ± {std:.2f}" if len(r) > 1 else "") +
              f" | {mean(1):.2f} | {mean(2):.2f} | {paper} |")


if __name__ == "__main__":
    main()
