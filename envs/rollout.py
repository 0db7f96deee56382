"""Episodes played by a policy, and their statistics: what every algorithm script needs about
episodes and nothing about models (as gym's vector envs and RecordEpisodeStatistics for CleanRL).

    trajs = envs.run_episodes("twenty_questions_subset", range(8), act)
    envs.episode_stats(trajs)   # mean return and success rate with their standard errors

``act(observations, candidates) -> (actions, action_ids)`` is called once per turn with the
observations of the episodes still running and their candidates: the commands the env lists as
admissible now (``info["valid_actions"]``: ALFWorld, Overcooked, VirtualHome, Jericho with
``valid_actions=True``), or None where it lists none; ``action_ids[i]`` (the token ids a model
sampled, or None) is kept in the step as ``"action_ids"``, so a loss can score exactly what was
sampled. An env whose ``info`` has an
``"anchor"`` (a key of its state without the history: WebShop's page, ALFWorld's world) gets it
recorded as the step's ``"anchor"``: the state the action was taken in (GiGPO's anchor state).
With a ``chat`` format (the scripts' ``--chat``), each observation the policy sees and the step
records is envs.chat_observation's: the episode as a conversation of token ids (envs/chat.py)."""

from __future__ import annotations

import numpy as np

from .chat import PLAIN, chat_observation
from .dataset import FORMAT_VERSION


def run_episodes(name: str, seeds, act, targets=None, progress=None, chat=PLAIN, **options):
    """Play one episode of env ``name`` per seed, in lockstep (episode i reset with ``seeds[i]`` and
    ``targets[i]`` if given; ``options`` go to ``envs.make``); ``progress(text)`` is called after
    every turn. Returns the trajectories in the dataset format, each step with its action_ids (and
    its anchor where the env gives one), each observation chat_observation's in the ``chat``."""
    from . import make  # the package imports this module first

    games = [make(name, **options) for _ in seeds]
    opts = [None if targets is None else {"target": t} for t in targets or seeds]
    starts = [g.reset(seed=s, options=o) for g, s, o in zip(games, seeds, opts)]
    obs, infos = [chat_observation(chat, None, o) for o, _ in starts], [i for _, i in starts]
    steps, active, n = [[] for _ in games], [True] * len(games), len(games)
    while any(active):
        live = [i for i in range(n) if active[i]]
        acts, ids = act([obs[i] for i in live], [infos[i].get("valid_actions") for i in live])
        for i, a, x in zip(live, acts, ids):
            anchor = infos[i].get("anchor")  # the state the action is taken in, if the env keys it
            o, r, terminated, truncated, infos[i] = games[i].step(a)
            done = terminated or truncated
            step = {"observation": obs[i], "action": a, "action_ids": x, "reward": r, "done": done}
            steps[i].append(step if anchor is None else step | {"anchor": anchor})
            obs[i], active[i] = chat_observation(chat, steps[i][-1], o), not done
        if progress is not None:
            progress(f"{n - sum(active)}/{n} episodes finished, turn {len(steps[live[0]])}")
    for g in games:
        getattr(g, "close", lambda: None)()
    head = {"format_version": FORMAT_VERSION, "env": name}
    return [
        {**head, "target": info["target"], "steps": s, "return": sum(x["reward"] for x in s)}
        | {"success": bool(info["won"])}
        for info, s in zip(infos, steps)
    ]


def transitions(trajs) -> list[dict]:
    """Replay-buffer transitions (s, a, r, s', d), one per step ("obs", "action", "reward",
    "next_obs", "done"). The last step of an episode is terminal (a win or the turn limit, d = 1),
    so its s' is never used and is set to s."""
    out = []
    for t in trajs:
        steps = t["steps"]
        for k, st in enumerate(steps):
            nxt = steps[k + 1]["observation"] if k + 1 < len(steps) else st["observation"]
            out.append(
                {"obs": st["observation"], "action": st["action"], "reward": float(st["reward"])}
                | {"next_obs": nxt, "done": float(st["done"])}
            )
    return out


def episode_stats(trajs) -> dict:
    """Mean return and success rate with their standard errors (sample s.d. / √n; NaN for one
    episode), the success rate per target, and the per-episode returns (for paired comparisons of
    two policies on the same episodes)."""
    returns = np.array([t["return"] for t in trajs], dtype=float)
    wins = np.array([t["success"] for t in trajs], dtype=float)
    per_target: dict = {}
    for t in trajs:
        per_target.setdefault(t["target"], []).append(float(t["success"]))
    return {
        "return": float(returns.mean()),
        "return_se": _se(returns),
        "success_rate": float(wins.mean()),
        "success_rate_se": _se(wins),
        "per_target_success": {k: float(np.mean(v)) for k, v in per_target.items()},
        "returns": returns.tolist(),
    }


def paired_difference(after, before) -> tuple[float, float]:
    """Mean per-episode difference (after − before) of two evaluations of the same episodes and its
    standard error (s.d. of the differences / √n)."""
    d = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    return float(d.mean()), _se(d)


def _se(x) -> float:
    return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")
