"""ArCHer's critic under a probe: does it tell a right guess from a wrong one, and a new question
from a repeated one? (ArCHer's long-run collapse; docs/archer.md, "What did not work")

    python experiments/archer_critic_probe.py                       # train a critic offline, probe
    python experiments/archer_critic_probe.py --critic-input joint  # the joint s+a ablation
    python experiments/archer_critic_probe.py --run runs/<run>      # probe a run's saved critic

A one-off probe that imports archer.py's internals on purpose (its critic, losses, actor loader and
rollout): it trains the critic outside any run, which no command line of archer.py does. So it
lives in experiments/, not benchmark/ (benchmark/ runs the scripts only through their command line),
and may need updating when archer.py's internals change.

Offline mode trains archer.py's critic with its own losses (Eq. 1 and Eq. 2, double heads, Polyak
target, archer.py's learning rate, batch 64) on scripted episodes of the 10-word Twenty
Questions, with one difference: Eq. (2)'s a ~ π is the data's action (there is no actor here), so V
is the data policy's value. Every --probe-every steps it evaluates A(s, a) = min Q(s, a) − min V(s)
on held-out scripted states (turn >= 2) for four actions per state:
  right     a guess of the secret (the game is won: Q* = 0)
  wrong     a guess of another of the 10 objects (Q* = −1 + γ V*(s') ≈ −1 + γ V*(s))
  new       a valid question from another episode's data that s has not asked
  repeated  a question s has already asked (its answer is in s: no information)
and prints the mean A of each, the right − wrong gap (± s.e. over states), how often A(right) >
A(wrong), the gap on "decided" states (the answers in s leave only the secret among the 10: there a
right guess is worth 1 − γV(s') >= 1 more), and the new − repeated gap. (Elsewhere a critic that
reads only s cannot know which guess is right: averaged over the probe states, the gap of the
Bayes-optimal critic is much smaller than on decided states.) A critic that cannot check a guess
against the answers in s scores right and wrong guesses alike, and an actor trained on it learns to
guess anything."""

import argparse
import copy
import json
import os
import random
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import archer  # noqa: E402
import envs  # noqa: E402
from envs import twenty_questions as tq  # noqa: E402

ENV = "twenty_questions_subset"


def consistent_objects(state: str) -> list:
    """The objects of the 10 whose oracle answers agree with every answered line of ``state``: what
    a critic reading s can know about the secret."""
    pairs = []
    for text in state.split("\n")[1:]:
        for reply in ("Yes.", "No.", "Invalid Question."):
            if text.endswith(" " + reply):
                pairs.append((text[: -len(reply) - 1], reply))
                break
    return [o for o in tq.SUBSET if all(tq.answer(o, q) == r for q, r in pairs)]


def guess_support(trajs) -> dict:
    """What the training data shows a critic about guesses: how many guesses it holds, how many are
    consistent with the answers in s (the scripted policy only ever guesses a consistent object),
    how many are made at decided states (one object left) and how many of those are right. A
    critic can learn that a wrong guess is worse than a right one only from data with wrong guesses
    it could have seen through: inconsistent ones, or wrong ones at decided states."""
    out = {"guesses": 0, "consistent": 0, "right": 0, "at_decided": 0, "right_at_decided": 0}
    for t in trajs:
        for st in t["steps"]:
            named = tq._mentioned_objects(st["action"]) & set(tq.SUBSET)
            if len(named) != 1:
                continue
            (obj,) = named
            cands = consistent_objects(st["observation"])
            out["guesses"] += 1
            out["consistent"] += obj in cands
            out["right"] += obj == t["target"]
            out["at_decided"] += len(cands) == 1
            out["right_at_decided"] += len(cands) == 1 and obj == t["target"]
    return out


def probe_set(n_episodes: int, seed: int):
    """(state, target, {kind: action}, number of objects still consistent with s) for every state at
    turn >= 2 of fresh scripted episodes."""
    rng = random.Random(seed)
    trajs = envs.collect_scripted(ENV, n_episodes, seed=seed)
    questions = sorted(
        {
            st["action"]
            for t in trajs
            for st in t["steps"]
            if not tq._mentioned_objects(st["action"])
            and tq.answer(t["target"], st["action"]) != "Invalid Question."
        }
    )
    out = []
    for t in trajs:
        for k, st in enumerate(t["steps"][2:], start=2):
            s = st["observation"]
            asked = [
                x["action"]
                for x in t["steps"][:k]
                if x["action"] in questions  # a valid non-guess question
            ]
            if not asked:
                continue
            wrong = rng.choice([o for o in tq.SUBSET if o != t["target"]])
            new = rng.choice([q for q in questions if q not in s])
            acts = {
                "right": tq.guess_question(t["target"], rng),
                "wrong": tq.guess_question(wrong, rng),
                "new": new,
                "repeated": rng.choice(asked),
            }
            out.append((s, t["target"], acts, len(consistent_objects(s))))
    return out


@torch.no_grad()
def probe(critic, tok, probes, joint: bool, max_tokens: int, batch: int = 64):
    """Mean A per action kind, the right − wrong gap with its s.e., P(A(right) > A(wrong))."""
    kinds = list(probes[0][2])
    adv = {k: [] for k in kinds}
    for i in range(0, len(probes), batch):
        chunk = probes[i : i + batch]
        states = [p[0] for p in chunk]
        s = archer.critic_inputs(tok, states, max_tokens)
        for k in kinds:
            acts = archer.critic_action_texts(states, [p[2][k] for p in chunk], joint)
            a = archer.critic_inputs(tok, acts, max_tokens)
            adv[k] += archer.advantage(*critic(*s, *a)).tolist()
    adv = {k: np.array(v) for k, v in adv.items()}
    gap = adv["right"] - adv["wrong"]
    rep = adv["new"] - adv["repeated"]
    # where the answers in s leave only the secret, a right guess is worth 1 − γV(s') ≥ 1 more
    decided = gap[np.array([p[3] == 1 for p in probes])]
    return {
        **{f"A_{k}": float(v.mean()) for k, v in adv.items()},
        "right_minus_wrong": float(gap.mean()),
        "right_minus_wrong_se": float(gap.std(ddof=1) / np.sqrt(len(gap))),
        "p_right_above_wrong": float((gap > 0).mean()),
        "decided_states": len(decided),
        "right_minus_wrong_decided": float(decided.mean()) if len(decided) else float("nan"),
        "right_minus_wrong_decided_se": (
            float(decided.std(ddof=1) / np.sqrt(len(decided))) if len(decided) > 1 else float("nan")
        ),
        "new_minus_repeated": float(rep.mean()),
        "new_minus_repeated_se": float(rep.std(ddof=1) / np.sqrt(len(rep))),
    }


def line(step, r):
    return (
        f"step {step:5d}  A right {r['A_right']:+.2f}  wrong {r['A_wrong']:+.2f}  "
        f"new {r['A_new']:+.2f}  repeated {r['A_repeated']:+.2f}  "
        f"| right-wrong {r['right_minus_wrong']:+.2f} ± "
        f"{r['right_minus_wrong_se']:.2f} (P>0 {r['p_right_above_wrong']:.2f}; decided states "
        f"{r['right_minus_wrong_decided']:+.2f} ± {r['right_minus_wrong_decided_se']:.2f})  "
        f"new-repeated "
        f"{r['new_minus_repeated']:+.2f} ± {r['new_minus_repeated_se']:.2f}"
    )


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--run", default=None, help="probe this archer.py run's saved critic")
    p.add_argument("--critic", default="tiny", help="critic encoder (archer.py --critic)")
    p.add_argument("--critic-input", default="separate", choices=["separate", "joint"])
    p.add_argument("--episodes", type=int, default=2000, help="training episodes")
    p.add_argument(
        "--data-actor",
        default=None,
        help="train on this actor's own sampled episodes (e.g. a BC actor, runs/<run>/actor) "
        "instead of the scripted policy's: they hold the wrong guesses the scripted data lacks",
    )
    p.add_argument("--steps", type=int, default=2000, help="critic steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--critic-lr", type=float, default=6e-4)
    p.add_argument("--tau", type=float, default=0.1)
    p.add_argument("--gamma", type=float, default=0.95)
    p.add_argument(
        "--targets",
        default="td",
        choices=["td", "mc"],
        help="'td': Eqs. (1)-(2) as archer.py; 'mc': Q and V regress on the data's discounted "
        "return-to-go (no bootstrapping: separates what the encoder can represent from what TD "
        "learns)",
    )
    p.add_argument("--probe-every", type=int, default=500)
    p.add_argument("--probe-episodes", type=int, default=100, help="held-out episodes to probe")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--out", default=None, help="write the probe results here (JSON)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    probes = probe_set(a.probe_episodes, seed=4242)
    print(
        f"probe: {len(probes)} states (turn >= 2) of {a.probe_episodes} held-out scripted episodes"
    )
    # the same probe on states of the first training episodes (seed 0): can the critic fit its data?
    train_probes = probe_set(a.probe_episodes, seed=0)
    results = []
    if a.run:
        saved = json.load(open(os.path.join(a.run, "args.json")))
        joint = saved.get("critic_input", "separate") == "joint"
        critic, tok = archer.load_critic(os.path.join(a.run, "critic"), archer.Args(env=ENV))
        r = probe(critic.eval(), tok, probes, joint, saved.get("critic_max_tokens", 480))
        print(line(0, r))
        results.append({"step": None, **r})
    else:
        joint = a.critic_input == "joint"
        critic, tok = archer.load_critic(a.critic, archer.Args(env=ENV))
        target = copy.deepcopy(critic).requires_grad_(False)
        opt = torch.optim.AdamW(critic.parameters(), lr=a.critic_lr)
        if a.data_actor:
            import types

            actor, actor_tok = archer.load_actor(a.data_actor, archer.Args(env=ENV))
            cfg = types.SimpleNamespace(
                env=ENV, max_turns=None, oracle="kb", max_new_tokens=32, temperature=1.0,
                top_k=0, top_p=1.0, max_obs_tokens=448,
            )  # fmt: skip
            trajs = []
            for i in range(0, a.episodes, 200):
                with torch.no_grad():
                    more, _ = archer.run_episodes(
                        actor.eval(), actor_tok, cfg, range(i, i + min(200, a.episodes - i))
                    )
                trajs += more
        else:
            trajs = envs.collect_scripted(ENV, a.episodes, seed=0)
        support = guess_support(trajs)
        print(f"training data guesses: {support}")
        buffer = envs.transitions(trajs)
        returns_to_go = []
        for t in trajs:
            g, rtg = 0.0, []
            for st in reversed(t["steps"]):
                g = st["reward"] + a.gamma * g
                rtg.append(g)
            returns_to_go += rtg[::-1]
        for tr, g in zip(buffer, returns_to_go):
            tr["return_to_go"] = g
        rng = random.Random(a.seed)
        print(
            f"critic {a.critic} ({a.critic_input}, {a.targets} targets), {len(buffer)} "
            f"transitions, {a.steps} steps"
        )
        t0 = time.time()
        for step in range(1, a.steps + 1):
            mb = [buffer[rng.randrange(len(buffer))] for _ in range(a.batch_size)]
            s, s_next = (
                archer.critic_inputs(tok, [t[k] for t in mb], 480) for k in ("obs", "next_obs")
            )
            states = [t["obs"] for t in mb]
            act = archer.critic_action_texts(states, [t["action"] for t in mb], joint)
            a_in = archer.critic_inputs(tok, act, 480)
            r = torch.tensor([t["reward"] for t in mb])
            d = torch.tensor([t["done"] for t in mb])
            with torch.no_grad():
                v1n, v2n = target.value(*s_next)
                q1t, q2t, _, _ = target(*s, *a_in)  # the data action stands in for a ~ π
            q1, q2, v1, v2 = critic(*s, *a_in)
            if a.targets == "td":
                loss = archer.q_loss(q1, q2, r, d, v1n, v2n, a.gamma)
                loss = loss + archer.v_loss(v1, v2, q1t, q2t)
            else:
                g = torch.tensor([t["return_to_go"] for t in mb])
                loss = sum(((x - g) ** 2).mean() for x in (q1, q2, v1, v2))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
            opt.step()
            archer.soft_update(target, critic, a.tau)
            if step % a.probe_every == 0 or step == a.steps:
                r = probe(critic.eval(), tok, probes, joint, 480)
                fit = probe(critic, tok, train_probes, joint, 480)
                critic.train()
                print(
                    line(step, r) + f"  | on training states: right-wrong "
                    f"{fit['right_minus_wrong']:+.2f} ± {fit['right_minus_wrong_se']:.2f}  loss "
                    f"{loss.item():.3f}  {time.time() - t0:.0f}s",
                    flush=True,
                )
                results.append({"step": step, **r, "train": fit})
    if a.out:
        with open(a.out, "w") as f:
            out = {"args": vars(a), "results": results}
            json.dump({**out, "data": support} if not a.run else out, f, indent=1)


if __name__ == "__main__":
    main()
