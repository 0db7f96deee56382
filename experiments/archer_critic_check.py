"""Does an archer.py run's critic know the returns of its own actor? (issue 80)

    python experiments/archer_critic_check.py runs/<run>            # a run saved with --save-model
    python experiments/archer_critic_check.py runs/<run> --episodes 20 --threads 1

The run's saved actor plays the evaluation episodes (archer.py's evaluate: the same env seeds,
targets and sampling seed), in the run's own format (chat or plain, as args.json says). For every
turn the run's saved critic gives min(V1, V2)(s) and min(Q1, Q2)(s, a), set against the discounted
return that followed (γ of the run), and A = Q − V (the advantage the actor's update follows) of
  - the action taken, at the turns that won (a correct guess) and at all the others, and
  - the correct guess put in place of the action at the turns that did not win (it would win),
and there Q(s, correct guess) − Q(s, a taken): the choice the actor's update should learn.
A critic that knows the returns has V and Q correlated with them, A > 0 at the winning guesses and
Q(s, correct guess) > Q(s, a) where the actor did not guess it. Writes <run>/critic_check.json.

It imports archer.py's internals (its loaders, rollout and critic inputs), so it lives in
experiments/ (benchmark/ runs the scripts through their command line only);
benchmark/sft_archer.py runs it on the ArCHer stage's run."""

import argparse
import json
import os
import random
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import archer  # noqa: E402
import envs  # noqa: E402
from envs import twenty_questions  # noqa: E402


def turns(trajs, gamma: float, seed: int = 0):
    """(state, action, a correct guess of the episode's secret, discounted return-to-go, won
    here) for every turn of every trajectory."""
    rows, rng = [], random.Random(seed)
    for traj in trajs:
        ret, last = 0.0, len(traj["steps"]) - 1
        for k, step in reversed(list(enumerate(traj["steps"]))):
            ret = step["reward"] + gamma * ret
            guess = twenty_questions.guess_question(traj["target"], rng)
            rows.append(
                (step["observation"], step["action"], guess, ret, k == last and traj["success"])
            )
    return rows


@torch.no_grad()
def critic_values(critic, tok, rows, args, batch: int = 32):
    """min Q of the action taken, min Q of the correct guess, min V of the state: arrays per row."""
    q, q_guess, v = [], [], []
    joint = args.critic_input == "joint"
    for c in range(0, len(rows), batch):
        part = rows[c : c + batch]
        states = [r[0] for r in part]
        s = archer.critic_inputs(tok, states, args.critic_max_tokens)
        for k, out in ((1, q), (2, q_guess)):
            texts = archer.critic_action_texts(states, [r[k] for r in part], joint)
            a = archer.critic_inputs(tok, texts, args.critic_max_tokens)
            q1, q2, v1, v2 = critic(*s, *a)
            out += torch.minimum(q1, q2).tolist()
        v += torch.minimum(v1, v2).tolist()
    return np.array(q), np.array(q_guess), np.array(v)


def summary(rows, q, q_guess, v, episodes: int) -> dict:
    """The numbers critic_check.json holds (A > 0: the share of those turns with a positive A)."""
    g = np.array([r[3] for r in rows])
    win = np.array([r[4] for r in rows], dtype=bool)
    adv, adv_guess = q - v, q_guess - v
    out = dict(episodes=episodes, turns=len(rows), wins=int(win.sum()), mean_return=float(g.mean()))
    out |= dict(mean_v=float(v.mean()), mean_q=float(q.mean()))
    out |= dict(corr_v_return=float(np.corrcoef(v, g)[0, 1]))
    out |= dict(corr_q_return=float(np.corrcoef(q, g)[0, 1]))
    for name, a, where in (
        ("win", adv, win),
        ("other", adv, ~win),
        ("correct_guess", adv_guess, ~win),
    ):
        out[f"adv_{name}"] = float(a[where].mean()) if where.any() else float("nan")
        out[f"adv_{name}_positive"] = float((a[where] > 0).mean()) if where.any() else float("nan")
    gap = (q_guess - q)[
        ~win
    ]  # at a turn that did not win: the winning action against the one taken
    out["guess_minus_taken"] = float(gap.mean()) if len(gap) else float("nan")
    out["guess_minus_taken_se"] = (
        float(gap.std(ddof=1) / np.sqrt(len(gap))) if len(gap) > 1 else 0.0
    )
    out["guess_above_taken"] = float((gap > 0).mean()) if len(gap) else float("nan")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("run", help="an archer.py run directory saved with --save-model")
    p.add_argument("--episodes", type=int, default=50, help="evaluation episodes to play")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = p.parse_args()
    if not all(os.path.isdir(os.path.join(a.run, m)) for m in ("actor", "critic")):
        p.exit(2, f"{a.run}: no actor/ and critic/ (run archer.py with --save-model)\n")
    if a.episodes < 1:
        p.exit(2, f"--episodes {a.episodes}: at least 1\n")
    if a.threads:
        torch.set_num_threads(a.threads)
    saved = json.load(open(os.path.join(a.run, "args.json")))
    args = archer.Args(**saved | dict(lora_r=0, resume=None))  # the saved actor has LoRA merged
    actor, tok = archer.load_actor(os.path.join(a.run, "actor"), args)
    critic, critic_tok = archer.load_critic(os.path.join(a.run, "critic"), args)
    targets = envs.make(args.env).targets
    targets = [targets[i % len(targets)] for i in range(a.episodes)]
    torch.manual_seed(archer.EVAL_SEED)
    seeds = range(archer.EVAL_SEED, archer.EVAL_SEED + a.episodes)
    trajs, _ = archer.run_episodes(actor.eval(), tok, args, seeds, targets=targets)
    rows = turns(trajs, args.gamma)
    out = summary(rows, *critic_values(critic.eval(), critic_tok, rows, args), a.episodes)
    json.dump(out, open(os.path.join(a.run, "critic_check.json"), "w"), indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
