"""Write a dataset of scripted-policy episodes and print its statistics.

python -m envs.collect --env twenty_questions_subset --episodes 10000 --seed 0 \
    --out data/20q_subset.jsonl
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import _GAMES, FORMAT_VERSION, make, names, save_dataset, scripted_policy


def collect_scripted(
    env_name: str,
    episodes: int,
    seed: int = 0,
    mode: str = "suboptimal",
    progress: bool = False,
    **env_options,
) -> list[dict]:
    """Play ``episodes`` episodes of the scripted policy; episode i is reset with seed
    ``seed + i``."""
    # the question games' policies know their targets already; other envs' policies take the env's
    # options
    policy_options = (
        {}
        if env_name in _GAMES
        else {
            k: v
            for k, v in env_options.items()
            if (k, v) not in (("max_turns", None), ("oracle", "kb"))
        }
    )
    env = make(env_name, **env_options)
    policy = scripted_policy(env_name, seed=seed, mode=mode, **policy_options)
    trajs, start = [], time.time()
    for i in range(episodes):
        obs, info = env.reset(seed=seed + i)
        steps, done = [], False
        while not done:
            action = policy(obs)
            next_obs, reward, term, trunc, info = env.step(action)
            done = term or trunc
            steps.append({"observation": obs, "action": action, "reward": reward, "done": done})
            obs = next_obs
        trajs.append(
            {
                "format_version": FORMAT_VERSION,
                "env": env_name,
                "target": info["target"],
                "steps": steps,
                "return": sum(s["reward"] for s in steps),
                "success": info["won"],
            }
        )
        if progress and ((i + 1) % max(1, episodes // 20) == 0 or i + 1 == episodes):
            rate = (i + 1) / max(time.time() - start, 1e-9)
            bar = "#" * (20 * (i + 1) // episodes)
            print(
                f"\r[{bar:<20}] {i + 1}/{episodes} episodes  {rate:,.0f} ep/s",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if progress:
        print(file=sys.stderr)
    return trajs


def summarize(trajs: list[dict]) -> dict:
    """Episodes, mean return, success rate, mean turns."""
    n = len(trajs)
    return {
        "episodes": n,
        "mean_return": sum(t["return"] for t in trajs) / n,
        "success_rate": sum(t["success"] for t in trajs) / n,
        "mean_turns": sum(len(t["steps"]) for t in trajs) / n,
    }


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default="twenty_questions_subset", choices=names(), help="which game")
    p.add_argument("--episodes", type=int, default=1000, help="number of episodes to play")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the policy; episode i is reset with seed+i"
    )
    p.add_argument(
        "--mode",
        default="suboptimal",
        help="scripted policy: suboptimal = the papers' kind of data (default); greedy = a good "
        "questioner, for reference; other envs list their modes in their module's MODES",
    )
    p.add_argument("--out", default=None, help="output .jsonl file (omit to only print statistics)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    if args.out and os.path.isdir(args.out):
        p.error(f"--out {args.out}: a directory; give a file name such as {args.out}/data.jsonl")
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        p.error(f"--out {args.out}: its folder does not exist")
    start = time.time()
    trajs = collect_scripted(args.env, args.episodes, args.seed, args.mode, progress=True)
    if args.out:
        save_dataset(args.out, trajs)
    s = summarize(trajs)
    steps = sum(len(t["steps"]) for t in trajs)
    print(
        f"env={args.env} mode={args.mode} episodes={s['episodes']} "
        f"mean_return={s['mean_return']:.2f} success_rate={s['success_rate']:.3f} "
        f"mean_turns={s['mean_turns']:.2f} "
        f"env_steps_per_s={steps / (time.time() - start):,.3g}"
        + (f" -> {args.out}" if args.out else "")
    )
    return s


if __name__ == "__main__":
    main()
