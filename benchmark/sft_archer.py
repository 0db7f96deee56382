"""The papers' pipeline in miniature (issue 80): SmolLM2-135M-Instruct (packaged, chat template,
LoRA r 8) on the 10-word Twenty Questions, supervised on scripted conversations, then ArCHer
online from that SFT actor; each stage a command of the scripts themselves, every evaluation on
the same 50 episodes (fixed env and sampling seeds), so the gains are paired differences.

    python benchmark/sft_archer.py                   # seed 1: untrained, SFT, ArCHer (~1 h 45 min)
    python benchmark/sft_archer.py --seeds 1 2 3     # more seeds (finished stages are kept)
    python benchmark/sft_archer.py --report          # only the table, from what finished

Stages (runs under --out/<seed>/<stage>; a stage whose summary.json exists is not rerun):
  untrained  filtered_bc.py --offline-steps 0 --iterations 0: the model as packaged, evaluated
  sft        filtered_bc.py --pack-episodes --iterations 0 --save-model: BC on 2,000 scripted
             conversations (Table 2's SFT lr 2e-4; 400 steps of 16 pairs), then evaluated
  archer     archer.py --actor <sft>/actor --bc-steps 0 --save-model: ArCHer (--preset auto =
             paper, scaled down: 16 rollouts an iteration, batch 32, 2 warm-up iterations, 10
             critic steps an iteration, MiniLM critic)
then experiments/archer_critic_check.py on the archer run: its critic's values against the returns.
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
    each stage's run wall time (summary.json; the command also loads models)."""
    rows = ["| seed | untrained | SFT | ArCHer's start | ArCHer | SFT − untrained | "]
    rows[0] += "ArCHer − its start | greedy success (untrained / SFT / ArCHer) | run minutes |"
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
            "The final critic on the final actor's 50 evaluation episodes"
            " (`experiments/archer_critic_check.py`):",
            "",
        ]
        rows.append(
            "| seed | turns | return-to-go (mean) | V (mean) | corr(V, return) | corr(Q, return) | "
            "A at winning guesses (> 0) | A elsewhere (> 0) | A of the correct guess there (> 0) | "
            "Q(correct guess) − Q(taken) there (> 0) |"
        )
        rows.append("|" + "---|" * 10)
    for seed, c in checks:
        row = [seed, c["turns"], f"{c['mean_return']:.2f}", f"{c['mean_v']:.2f}"]
        row += [f"{c['corr_v_return']:.2f}", f"{c['corr_q_return']:.2f}"]
        for k in ("adv_win", "adv_other", "adv_correct_guess"):
            row.append(f"{c[k]:+.2f} ({c[k + '_positive']:.2f})")
        gap = f"{c['guess_minus_taken']:+.2f} ± {c['guess_minus_taken_se']:.2f}"
        row.append(f"{gap} ({c['guess_above_taken']:.2f})")
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
            check = f"{sys.executable} experiments/archer_critic_check.py {archer_run}"
            check += f" --threads {a.threads}"
            print(f"[{time.strftime('%H:%M:%S')}] seed {seed}: {check}", flush=True)
            with open(os.path.join(archer_run, "critic_check.txt"), "w") as log:
                subprocess.run(
                    check.split(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True
                )
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
