"""Measure the Jericho envs: scripted policies' mean return / success / length / illegal commands
and env steps per second (time inside ``env.step`` only, policy excluded), as a Markdown table.
Plays ``jericho`` (the bundled test game, or ``$TURNRL_ROM``) and, when ``$TURNRL_ROM`` is the
detective.z5 Jericho supports, ``detective`` too.

    OMP_NUM_THREADS=1 python benchmark/envs_jericho.py --episodes 1000
    TURNRL_ROM=~/if/detective.z5 OMP_NUM_THREADS=1 python benchmark/envs_jericho.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import envs  # noqa: E402
from envs import jericho_env  # noqa: E402


def measure(name: str, mode: str, episodes: int, seed: int = 0) -> dict:
    env = envs.make(name)
    policy = envs.scripted_policy(name, seed=seed, mode=mode)
    returns, wins, turns, illegal, steps, env_time = [], 0, 0, 0, 0, 0.0
    for i in range(episodes):
        obs, info = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            action = policy(obs)
            t0 = time.perf_counter()
            obs, r, term, trunc, info = env.step(action)
            env_time += time.perf_counter() - t0
            total, done, steps = total + r, term or trunc, steps + 1
            illegal += info["illegal"]
        returns.append(total)
        wins += info["won"]
        turns += info["turn"]
    return {
        "env": f"{name} ({env.targets[0]})",
        "mode": mode,
        "episodes": episodes,
        "mean_return": sum(returns) / episodes,
        "success": wins / episodes,
        "turns": turns / episodes,
        "illegal": illegal / episodes,
        "steps_per_s": steps / env_time,
    }


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=1000)
    args = p.parse_args(argv)
    names = ["jericho"]
    rom = jericho_env.resolve_rom()
    if rom.is_file() and jericho_env._md5(str(rom)) == jericho_env.DETECTIVE_MD5:
        names.append("detective")
    print(
        "| env | policy | episodes | mean return | success | steps | illegal commands "
        "| env steps/s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        for mode in jericho_env.MODES:
            r = measure(name, mode, args.episodes)
            cells = [
                r["env"],
                mode,
                r["episodes"],
                f"{r['mean_return']:.2f}",
                f"{r['success']:.3f}",
                f"{r['turns']:.2f}",
                f"{r['illegal']:.2f}",
                f"{r['steps_per_s']:,.0f}",
            ]
            print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
