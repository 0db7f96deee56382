"""Measure chess and chess_endgame: each scripted policy's mean return and success, env steps per
second and Stockfish's time per move.

    python benchmark/envs_chess.py          # Markdown table for docs/envs.md (~20 min, 1 core)
    python benchmark/envs_chess.py --quick  # a few episodes per row, to check it runs

Episode i is reset with seed i; every policy has seed 0. A row stops at its episode count or after
``--max-seconds`` (the table says how many episodes it played). "env steps/s" times ``env.step``
alone (the opponent's move included, the agent's thinking excluded); "opp. ms/move" and "agent
ms/move" are the mean wall time of one Stockfish request (through python-chess) for the opponent and
for a Stockfish agent. Rows with Stockfish are skipped when the binary is missing.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import envs  # noqa: E402  (after the path insert)
from envs import chess_env  # noqa: E402

CHEAP = ("suboptimal", "random", "greedy", "heuristic")
ENGINE = ("stockfish_1350", "stockfish_1800", "stockfish_2400", "stockfish")


def play(name: str, env_kw: dict, mode: str, episodes: int, max_seconds: float) -> dict:
    """Play up to ``episodes`` episodes (or ``max_seconds``) and summarise them."""
    env = envs.make(name, **env_kw)
    policy = envs.scripted_policy(name, seed=0, mode=mode)
    returns, wins, steps, illegal, env_time = [], 0, 0, 0, 0.0
    start = time.perf_counter()
    for i in range(episodes):
        obs, _ = env.reset(seed=i)
        total, done = 0.0, False
        while not done:
            action = policy(obs)
            t0 = time.perf_counter()
            obs, r, term, trunc, info = env.step(action)
            env_time += time.perf_counter() - t0
            total, steps, illegal = total + r, steps + 1, illegal + info["illegal"]
            done = term or trunc
        returns.append(total)
        wins += info["won"]
        if time.perf_counter() - start > max_seconds:
            break
    n = len(returns)
    mean = sum(returns) / n
    var = sum((x - mean) ** 2 for x in returns) / max(n - 1, 1)
    row = {
        "episodes": n,
        "mean": mean,
        "se": math.sqrt(var / n),
        "success": wins / n,
        "steps": steps / n,
        "illegal": illegal / max(steps, 1),
        "rate": steps / env_time,
        "opp_ms": None,
        "agent_ms": None,
    }
    if env.engine is not None and env.engine.calls:
        row["opp_ms"] = 1000 * env.engine.seconds / env.engine.calls
    if policy.engine is not None and policy.engine.calls:
        row["agent_ms"] = 1000 * policy.engine.seconds / policy.engine.calls
    env.close()
    policy.close()
    return row


def fmt_ms(x) -> str:
    return "" if x is None else f"{x:.1f}"


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--episodes", type=int, default=1000, help="episodes per row without engines")
    p.add_argument(
        "--engine-episodes",
        type=int,
        default=1000,
        help="episodes per row with Stockfish (capped by --max-seconds)",
    )
    p.add_argument("--max-seconds", type=float, default=60.0, help="wall-time cap per row")
    p.add_argument("--quick", action="store_true", help="5 episodes per row")
    args = p.parse_args(argv)
    if args.quick:
        args.episodes = args.engine_episodes = 5
    have_sf = chess_env.find_stockfish() is not None
    rows = []
    for name, extra in [
        ("chess_endgame", {"pieces": "kQK"}),
        ("chess_endgame", {"pieces": "kRK"}),
        ("chess", {}),
    ]:
        opponents = ["greedy", "stockfish"] if name == "chess_endgame" else ["stockfish"]
        for opponent in opponents:
            if opponent == "stockfish" and not have_sf:
                print(f"skipping {name} vs stockfish: binary not found", file=sys.stderr)
                continue
            for mode in CHEAP + (ENGINE if have_sf else ()):
                uses_sf = opponent == "stockfish" or mode in ENGINE
                n = args.engine_episodes if uses_sf else args.episodes
                row = play(
                    name,
                    {**extra, "opponent": opponent},
                    mode,
                    n,
                    args.max_seconds if uses_sf else float("inf"),
                )
                label = f"{name} {extra.get('pieces', '')}".strip()
                rows.append((label, opponent, mode, row))
                print(f"{label} vs {opponent} {mode}: {row}", file=sys.stderr, flush=True)
    print(
        "| env | opponent | policy | episodes | mean return (± s.e.) | success | steps/episode "
        "| illegal moves | env steps/s | opp. ms/move | agent ms/move |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, opponent, mode, r in rows:
        print(
            f"| {label} | {opponent} | {mode} | {r['episodes']} | {r['mean']:.2f} ± {r['se']:.2f} "
            f"| {r['success']:.3f} | {r['steps']:.1f} | {100 * r['illegal']:.1f}% "
            f"| {r['rate']:,.0f} | {fmt_ms(r['opp_ms'])} | {fmt_ms(r['agent_ms'])} |"
        )


if __name__ == "__main__":
    main()
