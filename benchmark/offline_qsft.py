"""The Q-SFT paper's Table 1 at small scale: SFT, filtered BC, offline ArCHer (IQL + AWR), ILQL and
Q-SFT on the same offline data per game, with the same number of policy gradient steps.

    python benchmark/offline_qsft.py                      # 4 games x 5 methods x seeds 1-2
    python benchmark/offline_qsft.py --games twenty_questions_subset --seeds 1 2 3
    python benchmark/offline_qsft.py --games wordle_small --steps 3000 --out runs/benchmark/qsft3000
    python benchmark/offline_qsft.py --games alfworld_pick_small alfworld_clean_small \
        --methods sft qsft ilql --steps 400 --eval-episodes 100 --out runs/benchmark/qsft_alfworld
    python benchmark/report.py                            # -> benchmark/results/qsft*_<game>.md

For each game it writes data/qsft_<game>_<episodes>.jsonl (the env's scripted, sub-optimal policy,
seed 0) unless it exists, and runs every method for each seed into
runs/benchmark/qsft/<game>/<method>/seed<k>/ (finished runs are skipped; --jobs at once). Budget:
every policy gets --steps gradient steps of batch --batch-size: SFT and filtered BC are
filtered_bc.py offline (rho 1.0 / --filter-rho); ArCHer offline takes --steps critic and --steps
actor steps; ILQL takes --steps steps of its joint loss (π_β's BC term included); Q-SFT clones π_φ
in --steps steps (that π_φ is its SFT row) and trains p_θ for --steps more. Every policy is
evaluated on the same --eval-episodes episodes (sampled)."""

import argparse
import os
import shlex
import subprocess
import sys

from online import find_run, run_pool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GAMES = ["twenty_questions_subset", "wordle_small", "wordle", "chess_endgame"]
# ALFWorld's one-bathroom layouts (not run by default): every policy chooses among the admissible
# commands there (--actions auto), as Q-SFT's agent does (§5); its success rate is the return
ALFWORLD = ["alfworld_pick_small", "alfworld_clean_small"]
# (wordle_small, the 20-secret CPU-scale game, has no paper row: the paper plays 400+ secrets)
# the paper's Table 1 (GPT-2-medium; Chess and Wordle from random initialisation; 100 evaluations)
PAPER = {
    "twenty_questions_subset": {"sft": -17.3, "qsft": -13.1, "ilql": -14.2},
    "wordle": {"sft": -3.81, "qsft": -2.11, "ilql": -2.08},
    "chess_endgame": {"sft": 0.11, "qsft": 0.15, "ilql": 0.09},
    # ALFWorld success rates (LLaVA-1.6; all of each type's rooms, here one bathroom's)
    "alfworld_pick_small": {"sft": 0.38, "qsft": 0.39, "ilql": 0.28},
    "alfworld_clean_small": {"sft": 0.0, "qsft": 0.19, "ilql": 0.0},
}
METHODS = {  # key -> (row label, script)
    "sft": ("SFT (BC, ρ 1.0)", "filtered_bc.py"),
    "filtered_bc": ("Filtered BC", "filtered_bc.py"),
    "archer_offline": ("ArCHer offline (IQL + AWR)", "archer_offline.py"),
    "ilql": ("ILQL", "ilql.py"),
    "qsft": ("Q-SFT", "qsft.py"),
}


def command(method, game, seed, data, a):
    common = ["--env", game, "--dataset", data, "--seed", str(seed), "--actor", a.actor]
    common += ["--eval-episodes", str(a.eval_episodes), "--checkpoint-every", "0"]
    bs = ["--batch-size", str(a.batch_size), "--micro-batch-size", str(a.batch_size)]
    if method in ("sft", "filtered_bc"):
        rho = "1.0" if method == "sft" else str(a.filter_rho)
        flags = ["--iterations", "0", "--offline-steps", str(a.steps), "--offline-rho", rho]
        flags += ["--offline-lr", str(a.bc_lr)] + bs
    elif method == "archer_offline":
        per = 20
        flags = ["--iterations", str(a.steps // per), "--critic-updates-per-iter", str(per)]
        flags += ["--actor-updates-per-iter", str(per), "--eval-every", "0"] + bs
    elif method == "ilql":
        per = 40
        flags = ["--iterations", str(a.steps // per), "--updates-per-iter", str(per)]
        flags += ["--eval-every", "0"] + bs
    else:
        per = 40
        flags = ["--bc-steps", str(a.steps), "--bc-lr", str(a.bc_lr), "--bc-batch-size"]
        flags += [str(a.batch_size), "--iterations", str(a.steps // per)]
        flags += ["--updates-per-iter", str(per), "--eval-every", "0"] + bs
    return [sys.executable, METHODS[method][1]] + common + flags + shlex.split(a.extra)


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--games", nargs="+", default=GAMES, choices=GAMES + ALFWORLD)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--episodes", type=int, default=2000, help="scripted episodes per dataset")
    p.add_argument("--steps", type=int, default=800, help="policy gradient steps per method")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--bc-lr", type=float, default=1e-3, help="learning rate of every BC phase")
    p.add_argument("--filter-rho", type=float, default=0.1, help="the filtered BC row's ρ")
    p.add_argument("--eval-episodes", type=int, default=200)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--actor", default="tiny", help="initial weights of every method")
    p.add_argument("--extra", default="", help="flags for every run, e.g. '--device cuda'")
    p.add_argument("--jobs", type=int, default=2, help="runs at once")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "benchmark", "qsft"))
    a = p.parse_args()
    a.out = os.path.abspath(a.out)
    jobs = []
    for game in a.games:
        data = os.path.join(ROOT, "data", f"qsft_{game}_{a.episodes}.jsonl")
        if not os.path.exists(data):
            os.makedirs(os.path.dirname(data), exist_ok=True)
            subprocess.run(
                [sys.executable, "-m", "envs.collect", "--env", game, "--episodes",
                 str(a.episodes), "--seed", "0", "--out", data],
                cwd=ROOT,
                check=True,
            )  # fmt: skip
        for seed in a.seeds:
            for method in a.methods:
                out = os.path.join(a.out, game, method, f"seed{seed}")
                if find_run(out) is None:
                    cmd = command(method, game, seed, data, a) + ["--output-dir", out]
                    jobs.append((f"{game} {method} seed {seed}", out, cmd))
    failed = run_pool(jobs, a.jobs, max(1, (os.cpu_count() or 2) // a.jobs))
    print(f"Q-SFT table: {len(jobs) - len(failed)} runs done, {len(failed)} failed; now: "
          "python benchmark/report.py")  # fmt: skip
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
