"""Measure the Wordle env: each scripted policy's mean return and success, and env steps per second.

    python benchmark/envs_wordle.py --episodes 5000      # prints a Markdown table (docs/envs.md)

Episode i is reset with seed i; the policy's seed is 0. "env.step alone" times ``env.step`` only
(the data policy's actions replayed, caches cleared first); "policy+env steps/s" times whole
episodes, policy included.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import envs  # noqa: E402  (after the path insert)
from envs import wordle  # noqa: E402


def play(mode: str, episodes: int, vocab_size: int, adversarial: bool) -> dict:
    """Mean return (with its standard error), success rate and policy+env steps per second."""
    env = envs.make("wordle", vocab_size=vocab_size, adversarial=adversarial)
    policy = envs.scripted_policy("wordle", seed=0, mode=mode, vocab_size=vocab_size)
    returns, wins, steps, start = [], 0, 0, time.perf_counter()
    for i in range(episodes):
        obs, _ = env.reset(seed=i)
        total, done = 0.0, False
        while not done:
            obs, r, done, _, info = env.step(policy(obs))
            total, steps = total + r, steps + 1
        returns.append(total)
        wins += info["won"]
    elapsed = time.perf_counter() - start
    mean = sum(returns) / episodes
    var = sum((x - mean) ** 2 for x in returns) / max(episodes - 1, 1)
    return {
        "mean": mean,
        "se": math.sqrt(var / episodes),
        "success": wins / episodes,
        "turns": steps / episodes,
        "rate": steps / elapsed,
    }


def env_only_rate(episodes: int, vocab_size: int, adversarial: bool) -> float:
    """Steps per second of env.step alone, replaying recorded data-policy actions."""
    trajs = envs.collect_scripted(
        "wordle", episodes, seed=0, vocab_size=vocab_size, adversarial=adversarial
    )
    env = envs.make("wordle", vocab_size=vocab_size, adversarial=adversarial)
    wordle.score.cache_clear()  # time a cold env: no feedback or candidate set cached yet
    wordle.candidates.cache_clear()
    steps, start = 0, time.perf_counter()
    for i, t in enumerate(trajs):
        env.reset(seed=i, options=None if adversarial else {"target": t["target"]})
        for s in t["steps"]:
            env.step(s["action"])
            steps += 1
    return steps / (time.perf_counter() - start)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=5000)
    p.add_argument("--vocab-sizes", type=int, nargs="+", default=[200, 400, 800])
    args = p.parse_args(argv)
    print(
        "| vocab_size | game | policy | mean return (± s.e.) | success | guesses "
        "| policy+env steps/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for vocab_size in args.vocab_sizes:
        for adversarial in (False, True):
            modes = wordle.MODES if not adversarial else ("suboptimal", "greedy")
            if adversarial and vocab_size != wordle.DEFAULT_VOCAB_SIZE:
                continue
            game = "adversarial" if adversarial else "fixed secret"
            for mode in modes:
                s = play(mode, args.episodes, vocab_size, adversarial)
                print(
                    f"| {vocab_size} | {game} | {mode} | {s['mean']:.2f} ± {s['se']:.2f} | "
                    f"{s['success']:.3f} | {s['turns']:.2f} | {s['rate']:,.0f} |",
                    flush=True,
                )
    for vocab_size in args.vocab_sizes:
        for adversarial in (False, True):
            rate = env_only_rate(min(args.episodes, 2000), vocab_size, adversarial)
            print(
                f"env.step alone, vocab_size={vocab_size}, adversarial={adversarial}: "
                f"{rate:,.0f} steps/s"
            )


if __name__ == "__main__":
    main()
