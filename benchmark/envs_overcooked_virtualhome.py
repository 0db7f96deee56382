"""Measure the Overcooked and VirtualHome envs: scripted policies' mean return / success / length
and env steps per second (time inside ``env.step`` only, policy excluded), as a Markdown table.

    OMP_NUM_THREADS=1 python benchmark/envs_overcooked_virtualhome.py --episodes 1000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import envs  # noqa: E402

SETTINGS = [
    ("overcooked_tomato_salad", {}),
    ("overcooked_tomato_lettuce_salad", {}),
    ("virtualhome_food_preparation", {}),
]
SETTINGS += [
    ("virtualhome_food_preparation", {"variant": v})
    for v in ("hamburger", "pizza", "cheese", "apple pie", "dishes", "clothes")
]
SETTINGS += [("virtualhome_entertainment", {})]


def measure(name: str, options: dict, mode: str, episodes: int, seed: int = 0) -> dict:
    env = envs.make(name, **options)
    policy = envs.scripted_policy(name, seed=seed, mode=mode)
    returns, wins, turns, prims, invalid, steps, env_time = [], 0, 0, 0, 0, 0, 0.0
    for i in range(episodes):
        obs, info = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            action = policy(obs)
            t0 = time.perf_counter()
            obs, r, term, trunc, info = env.step(action)
            env_time += time.perf_counter() - t0
            total, done, steps = total + r, term or trunc, steps + 1
            invalid += info["invalid"]
        returns.append(total)
        wins += info["won"]
        turns += info["turn"]
        prims += info.get("total_primitive_steps", info["turn"])
    return {
        "env": name + (f" ({options['variant']})" if options else ""),
        "mode": mode,
        "episodes": episodes,
        "mean_return": sum(returns) / episodes,
        "success": wins / episodes,
        "turns": turns / episodes,
        "primitive": prims / episodes,
        "invalid_frac": invalid / steps,
        "steps_per_s": steps / env_time,
    }


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=1000)
    args = p.parse_args(argv)
    print(
        "| env | policy | episodes | mean return | success | turns | primitive steps "
        "| invalid actions | env steps/s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, options in SETTINGS:
        for mode in ("suboptimal", "optimal"):
            r = measure(name, options, mode, args.episodes)
            cells = [
                r["env"],
                mode,
                r["episodes"],
                f"{r['mean_return']:.3f}",
                f"{r['success']:.3f}",
                f"{r['turns']:.2f}",
                f"{r['primitive']:.1f}",
                f"{r['invalid_frac']:.3f}",
                f"{r['steps_per_s']:,.0f}",
            ]
            print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
