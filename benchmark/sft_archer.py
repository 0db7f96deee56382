"""The papers' pipeline in miniature (issue 80): SmolLM2-135M-Instruct (packaged, chat template,
LoRA r 8) on the 10-word Twenty Questions, supervised on scripted conversations, then ArCHer
online from that SFT actor; each stage a command of the scripts themselves, every evaluation on
the same 50 episodes (fixed env and sampling seeds), so the gains are paired differences.

    python benchmark/sft_archer.py                   # seed 1: untrained, SFT, ArCHer (~1.5 h)
    python benchmark/sft_archer.py --seeds 1 2 3     # more seeds (finished stages are kept)
    python benchmark/sft_archer.py --report          # only the table, from what finished

Stages (runs under --out/<seed>/<stage>; a stage whose summary.json exists is not rerun):
  untrained  filtered_bc.py --offline-steps 0 --iterations 0: the model as packaged, evaluated
  sft        filtered_bc.py --pack-episodes --iterations 0 --save-model: BC on 2,000 scripted
             conversations (Table 2's SFT lr 2e-4; 400 steps of 16 pairs), then evaluated
  archer     archer.py --actor <sft>/actor --bc-steps 0: ArCHer (--preset auto = paper, scaled
             down: 16 rollouts an iteration, batch 32, 3 warm-up iterations, MiniLM critic)
The table goes to --results (benchmark/results/sft_archer.md)."""

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
    "archer": "archer.py --actor {sft}/actor --critic minilm --bc-steps 0 --iterations 8"
    " --warmup-iters 3 --rollouts-per-iter 16 --batch-size 32 --micro-batch-size 16"
    " --eval-every 0 --checkpoint-every 1",
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
    each stage's wall time."""
    rows = ["| seed | untrained | SFT | ArCHer's start | ArCHer | SFT − untrained | "]
    rows[0] += "ArCHer − its start | greedy success (untrained / SFT / ArCHer) | minutes |"
    rows.append("|" + "---|" * 9)
    for seed in seeds:
        runs = {s: find_run(os.path.join(out, str(seed), s)) for s in STAGES}
        sums = {s: json.load(open(os.path.join(r, "summary.json"))) for s, r in runs.items() if r}
        if "untrained" not in sums or "sft" not in sums:
            continue
        un, sft, arc = sums["untrained"], sums["sft"], sums.get("archer")
        row = [str(seed), cell(un), cell(sft), cell(arc, "start_eval") if arc else "–"]
        row += [cell(arc) if arc else "–", paired(sft["eval_returns"], un["eval_returns"])]
        row += [paired(arc["eval_returns"], arc["start_eval_returns"]) if arc else "–"]
        greedy = [f"{s['eval_success_rate_greedy']:.2f}" for s in (un, sft, arc) if s]
        minutes = [f"{sums[s]['wall_time_s'] / 60:.0f}" for s in STAGES if s in sums]
        row += [" / ".join(greedy), " / ".join(minutes)]
        rows.append("| " + " | ".join(row) + " |")
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
