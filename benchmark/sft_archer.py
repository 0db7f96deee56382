"""The papers' pipeline in miniature (issue 80): SmolLM2-135M-Instruct (packaged, chat template,
LoRA r 8) on the 10-word Twenty Questions, supervised on scripted conversations, then ArCHer
online from that SFT actor; each stage a command of the scripts themselves, every evaluation on
the same 50 episodes (fixed env and sampling seeds), so the gains are paired differences.

    python benchmark/sft_archer.py                   # seed 1: untrained, SFT, ArCHer (~2 h)
    python benchmark/sft_archer.py --seeds 1 2 3     # more seeds (finished stages are kept)
    python benchmark/sft_archer.py --report          # only the table, from what finished

Stages (runs under --out/<seed>/<stage>; a stage whose summary.json exists is not rerun):
  untrained  filtered_bc.py --offline-steps 0 --iterations 0: the model as packaged, evaluated
  sft        filtered_bc.py --pack-episodes --iterations 0 --save-model: BC on 2,000 scripted
             conversations (Table 2's SFT lr 2e-4; 400 steps of 16 pairs), then evaluated
  archer     archer.py --actor <sft>/actor --bc-steps 0 --save-model: ArCHer (--preset auto =
             paper, scaled down: 16 rollouts an iteration, batch 32, 2 warm-up iterations, 10
             critic steps an iteration, MiniLM critic)
then critic_check on the saved archer run: the critic's values against the returns.
The tables go to --results (benchmark/results/sft_archer.md)."""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import envs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMON = "--env twenty_questions_subset --chat on --lora-r 8 --max-obs-tokens 448"
COMMON += " --max-new-tokens 24 --eval-episodes 50"
STAGES = {
    "untrained": "filtered_bc.py --actor smollm2-135m --offline-steps 0 --iterations 0",
    "sft": "filtered_bc.py --actor smollm2-135m --scripted-episodes 2000 --offline-steps 400"
    " --pack-episodes --offline-lr 2e-4 --batch-size 16 --iterations 0 --save-model",
    "archer": "archer.py --actor {sft}/actor --critic minilm --bc-steps 0 --iterations 10"
    " --warmup-iters 2 --rollouts-per-iter 16 --batch-size 32 --micro-batch-size 16"
    " --critic-updates-per-iter 10 --eval-every 0 --checkpoint-every 1 --save-model",
}


def find_run(out):
    """The run directory under `out` that finished (holds summary.json), or None."""
    runs = sorted(os.listdir(out)) if os.path.isdir(out) else []
    done = [r for r in runs if os.path.exists(os.path.join(out, r, "summary.json"))]
    return os.path.join(out, done[-1]) if done else None


def run_stage(stage, seed, out, threads):
    """Run one stage (unless it finished), its log beside it; its run directory."""
    here = os.path.join(out, str(seed), stage)
    if find_run(here) is None:
        sft = find_run(os.path.join(out, str(seed), "sft"))
        cmd = f"{sys.executable} {STAGES[stage].format(sft=sft)} {COMMON} --seed {seed}"
        cmd += f" --torch-threads {threads} --output-dir {here}"
        os.makedirs(here, exist_ok=True)
        print(f"[{time.strftime('%H:%M:%S')}] seed {seed} {stage}: {cmd}", flush=True)
        with open(os.path.join(here, "log.txt"), "w") as log:
            subprocess.run(cmd.split(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    return find_run(here)


def critic_check(run_dir, episodes, threads):
    """Does the saved critic of an archer run know the returns? Its actor plays the evaluation
    episodes (archer.evaluate's seeds and targets); per turn, min(V1,V2)(s) and min(Q1,Q2)(s,a)
    against the discounted return that followed, and A = Q − V of the action taken and of the
    correct guess put in its place (which would win there): the sign of A is what the actor's
    update follows. Returns the summary, also kept in the run as critic_check.json."""
    import random

    import numpy as np
    import torch

    import archer
    from envs import twenty_questions

    saved = json.load(open(os.path.join(run_dir, "args.json")))
    args = archer.Args(**saved | dict(lora_r=0, resume=None))
    torch.set_num_threads(threads)
    actor, tok = archer.load_actor(os.path.join(run_dir, "actor"), args)
    critic, ctok = archer.load_critic(os.path.join(run_dir, "critic"), args)
    targets = envs.make(args.env).targets
    targets = [targets[i % len(targets)] for i in range(episodes)]
    torch.manual_seed(archer.EVAL_SEED)
    seeds = range(archer.EVAL_SEED, archer.EVAL_SEED + episodes)
    trajs, _ = archer.run_episodes(actor, tok, args, seeds, targets=targets)
    rows, rng = [], random.Random(0)
    for traj in trajs:
        ret = 0.0
        for k, step in reversed(list(enumerate(traj["steps"]))):
            ret = step["reward"] + args.gamma * ret
            win = k == len(traj["steps"]) - 1 and traj["success"]
            guess = twenty_questions.guess_question(traj["target"], rng)
            rows.append((step["observation"], step["action"], guess, ret, win))
    q, q_guess, v = [], [], []
    with torch.no_grad():
        for c in range(0, len(rows), 32):
            part = rows[c : c + 32]
            states = [r[0] for r in part]
            s = archer.critic_inputs(ctok, states, args.critic_max_tokens)
            for k, out in ((1, q), (2, q_guess)):
                texts = archer.critic_action_texts(
                    states, [r[k] for r in part], args.critic_input == "joint"
                )
                q1, q2, v1, v2 = critic(
                    *s, *archer.critic_inputs(ctok, texts, args.critic_max_tokens)
                )
                out += torch.minimum(q1, q2).tolist()
            v += torch.minimum(v1, v2).tolist()
    q, q_guess, v = np.array(q), np.array(q_guess), np.array(v)
    g = np.array([r[3] for r in rows])
    win = np.array([r[4] for r in rows])
    adv, adv_guess = q - v, q_guess - v
    out = dict(turns=len(rows), episodes=episodes, mean_return=float(g.mean()))
    out |= dict(mean_v=float(v.mean()), mean_q=float(q.mean()))
    out |= dict(corr_v_return=float(np.corrcoef(v, g)[0, 1]))
    out |= dict(corr_q_return=float(np.corrcoef(q, g)[0, 1]))
    out |= dict(adv_win=float(adv[win].mean()), adv_win_positive=float((adv[win] > 0).mean()))
    out |= dict(adv_other=float(adv[~win].mean()), adv_other_positive=float((adv[~win] > 0).mean()))
    out |= dict(adv_correct_guess=float(adv_guess[~win].mean()))
    out |= dict(adv_correct_guess_positive=float((adv_guess[~win] > 0).mean()))
    json.dump(out, open(os.path.join(run_dir, "critic_check.json"), "w"), indent=2)
    return out


def cell(summary, key="eval"):
    """'return ± s.e. (success)' of an evaluation in a summary.json."""
    ret, se, success = (summary[f"{key}_{k}"] for k in ("return", "return_se", "success_rate"))
    return f"{ret:.2f} ± {se:.2f} ({success:.2f})"


def paired(after, before):
    d, se = envs.paired_difference(after, before)
    return f"{d:+.2f} ± {se:.2f} ({d / se:.1f} s.e.)" if se > 0 else f"{d:+.2f} ± 0"


def report(out, seeds):
    """The table: per seed, each stage's sampled return (success) and greedy success, the paired
    gains SFT − untrained and ArCHer − its start (the SFT actor as archer.py evaluates it), and
    each stage's wall time."""
    rows = ["| seed | untrained | SFT | ArCHer's start | ArCHer | SFT − untrained | "]
    rows[0] += "ArCHer − its start | greedy success (untrained / SFT / ArCHer) | minutes |"
    rows.append("|" + "---|" * 9)
    for seed in seeds:
        runs = {s: find_run(os.path.join(out, str(seed), s)) for s in STAGES}
        sums = {s: json.load(open(os.path.join(r, "summary.json"))) for s, r in runs.items() if r}
        if "sft" not in sums:
            continue
        un, sft, arc = sums.get("untrained"), sums["sft"], sums.get("archer")
        row = [str(seed), cell(un) if un else "–", cell(sft)]
        row += [cell(arc, "start_eval") if arc else "–", cell(arc) if arc else "–"]
        row += [paired(sft["eval_returns"], un["eval_returns"]) if un else "–"]
        row += [paired(arc["eval_returns"], arc["start_eval_returns"]) if arc else "–"]
        greedy = [f"{s['eval_success_rate_greedy']:.2f}" if s else "–" for s in (un, sft, arc)]
        minutes = [f"{sums[s]['wall_time_s'] / 60:.0f}" if s in sums else "–" for s in STAGES]
        row += [" / ".join(greedy), " / ".join(minutes)]
        rows.append("| " + " | ".join(row) + " |")
    checks = [(seed, find_run(os.path.join(out, str(seed), "archer"))) for seed in seeds]
    checks = [(seed, os.path.join(r, "critic_check.json")) for seed, r in checks if r]
    checks = [(seed, json.load(open(f))) for seed, f in checks if os.path.exists(f)]
    if checks:
        rows += [
            "",
            "The final critic on the final actor's 50 evaluation episodes (`critic_check`):",
            "",
        ]
        rows.append(
            "| seed | turns | return-to-go (mean) | V (mean) | corr(V, return) | corr(Q, return) | "
            "A at winning guesses (> 0) | A elsewhere (> 0) | A of the correct guess there (> 0) |"
        )
        rows.append("|" + "---|" * 9)
    for seed, c in checks:
        row = [seed, c["turns"], f"{c['mean_return']:.2f}", f"{c['mean_v']:.2f}"]
        row += [f"{c['corr_v_return']:.2f}", f"{c['corr_q_return']:.2f}"]
        for k in ("adv_win", "adv_other", "adv_correct_guess"):
            row.append(f"{c[k]:+.2f} ({c[k + '_positive']:.2f})")
        rows.append("| " + " | ".join(map(str, row)) + " |")
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    p.add_argument("--threads", type=int, default=2, help="torch threads of each run (one a time)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "sft_archer"))
    p.add_argument("--results", default=os.path.join(ROOT, "benchmark", "results"))
    p.add_argument("--report", action="store_true", help="only write the table")
    a = p.parse_args()
    for seed in [] if a.report else a.seeds:
        for stage in a.stages:
            run_stage(stage, seed, a.out, a.threads)
        archer_run = find_run(os.path.join(a.out, str(seed), "archer"))
        if archer_run and not os.path.exists(os.path.join(archer_run, "critic_check.json")):
            print(f"[{time.strftime('%H:%M:%S')}] seed {seed}: critic check", flush=True)
            critic_check(archer_run, 50, a.threads)
    commands = "\n".join(f"- {s}: `python {c} {COMMON} --seed S`" for s, c in STAGES.items())
    text = f"# SmolLM2-135M-Instruct: SFT, then ArCHer (issue 80)\n\n{report(a.out, a.seeds)}\n\n"
    text += f"`python benchmark/sft_archer.py --seeds {' '.join(map(str, a.seeds))}` "
    text += f"({time.strftime('%Y-%m-%d')}, {os.uname().machine}, {os.cpu_count()} cores, "
    text += f"{a.threads} torch threads, one run at a time). Returns: sampled, 50 evaluation "
    text += f"episodes, ± s.e.; (success rate). Stages:\n\n{commands}\n"
    os.makedirs(a.results, exist_ok=True)
    open(os.path.join(a.results, "sft_archer.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
