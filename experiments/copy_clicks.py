"""Issue 55: does a trained actor copy an identifier from its page? Counts its valid copies.

    python experiments/copy_clicks.py runs/<run>/actor --env webshop --episodes 100
    python experiments/copy_clicks.py runs/<run>/actor --env alfworld_pick --greedy

The actor (e.g. BC from the copy-pretrained actor that benchmark/tokenizer_copy.py --write-actor
writes) plays filtered_bc.py's evaluation episodes (its evaluation seed, targets in order; sampled,
or greedy with --greedy). Printed: the mean score ± s.e. and how many of its copies are valid
(valid_clicks): on WebShop its code clicks (`click[B0...]`) that name a code on their page, on an
ALFWorld env its admissible `take` commands. An actor saved by a run (`<run>/actor`) plays with its
run's --max-obs-tokens and --max-new-tokens (the run's args.json).

A one-off probe that imports filtered_bc.py's internals on purpose (its actor loader, rollout and
evaluation seed): no script's command line writes the evaluation episodes' actions out, and that is
what it counts. So it lives in experiments/, not benchmark/ (benchmark/ runs the scripts only
through their command line), and may need updating when filtered_bc.py's internals change. (It
was benchmark/tokenizer_copy.py --clicks.)"""

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import envs  # noqa: E402


def click_copies(actor: str, name: str, episodes: int, greedy: bool = False):
    """The actor's episodes (sampled, or greedy) on filtered_bc.py's evaluation episodes: (mean
    score, s.e., valid copies, copies) as valid_clicks counts them."""
    import torch

    sys.argv = sys.argv[:1]
    import filtered_bc as fb

    saved = os.path.join(os.path.dirname(os.path.abspath(actor)), "args.json")
    run = json.load(open(saved)) if os.path.exists(saved) else {}
    keep = {k: run[k] for k in ("max_obs_tokens", "max_new_tokens") if k in run}
    args = fb.Args(env=name, actor=actor, **keep)
    model, tok = fb.load_actor(actor, args)
    targets = envs.make(name).targets
    targets = [targets[i % len(targets)] for i in range(episodes)]
    torch.manual_seed(fb.EVAL_SEED)
    with torch.no_grad():
        trajs, _ = fb.run_episodes(
            model.eval(), tok, args, range(fb.EVAL_SEED, fb.EVAL_SEED + episodes), greedy, targets
        )
    stats = envs.episode_stats(trajs)
    return stats["return"], stats["return_se"], *valid_clicks(trajs)


def valid_clicks(trajs):
    """(valid, all) copies: WebShop code clicks (`click[B0...]`), valid when `[code]` is on their
    page, and ALFWorld `take` commands, valid when admissible (the result that the next observation
    shows is not "Nothing happens." — before the listed commands in `alfworld_pick_listed`; an
    episode's last command has none and is not counted)."""
    clicks = [s for t in trajs for s in t["steps"] if re.fullmatch(r"click\[B0\w+\]", s["action"])]
    pairs = [(a, b) for t in trajs for a, b in zip(t["steps"], t["steps"][1:])]
    takes = [b["observation"] for a, b in pairs if a["action"].lower().startswith("take ")]
    ok = sum(s["action"][5:] in s["observation"] for s in clicks)
    results = [o.split("\nAdmissible commands: ")[0].removesuffix("\n>") for o in takes]
    ok += sum(not r.endswith("\nNothing happens.") for r in results)
    return ok, len(clicks) + len(takes)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("actor", help="an actor folder (runs/<run>/actor, or --actor of any script)")
    copying = [n for n in envs.names() if n == "webshop" or n.startswith("alfworld")]
    p.add_argument("--env", default="webshop", choices=copying, help="webshop or an alfworld env")
    p.add_argument("--episodes", type=int, default=30, help="evaluation episodes to play")
    p.add_argument("--greedy", action="store_true", help="greedy, not sampled")
    a = p.parse_args(argv)
    if a.episodes < 1:
        p.error("--episodes must be at least 1")  # exit 2
    if not os.path.isdir(a.actor):
        p.error(f"{a.actor}: no such actor folder")  # exit 2, nothing loaded
    score, se, ok, n = click_copies(a.actor, a.env, a.episodes, a.greedy)
    what = "code clicks valid" if a.env == "webshop" else "take commands admissible"
    print(f"score {score:.3f} ± {se:.3f}; {ok} of {n} {what}")


if __name__ == "__main__":
    main()
