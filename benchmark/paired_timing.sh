#!/usr/bin/env bash
# Seconds per training iteration of two commits, paired. This 2-core machine's speed drifts by ±30%
# within minutes, so runs one after the other compare the machine as much as the code. Here both
# commits run at the same time, one core and one torch thread each, and swap cores every
# repetition: drift and a slower core hit both alike. Each commit is a `git worktree` of this
# repository; the runs start from ACTOR (a BC actor, so iterations look like a real run's) with no
# evaluation in between, and their iteration_time_s (summary.json's history) are compared. FLAGS
# come last, so they win over these settings.
#
#   bash benchmark/paired_timing.sh BASE NEW SCRIPT [FLAGS...]
#   e.g. ACTOR=runs/<bc run>/actor bash benchmark/paired_timing.sh 9f0cdab HEAD archer.py \
#          --bc-steps 0 --warmup-iters 0
#
# Environment: REPS (repetitions, default 2), ITERATIONS (per run, default 4), ACTOR (default tiny),
# PYTHON (default python), OUT (runs and worktrees, default a temporary folder, removed at the end).
# Prints one line per iteration and, last, the totals, medians and the ratio base / new.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
base=$1 new=$2 script=$3
shift 3
flags=("$@")
reps=${REPS:-2} iters=${ITERATIONS:-4} python=${PYTHON:-python} actor=${ACTOR:-tiny}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
if [ "$(nproc --all)" -lt 2 ]; then
  echo "paired_timing.sh needs 2 cores (it runs both commits at once, one core each)" >&2
  exit 2
fi
[ -e "$actor" ] && actor=$(cd "$actor" && pwd)  # the worktrees run elsewhere
for c in "$base" "$new"; do
  git -C "$repo" rev-parse --verify -q "$c^{commit}" >/dev/null || {
    echo "not a commit: $c" >&2
    exit 2
  }
done
out=${OUT:-$(mktemp -d)}
cleanup() {
  for v in base new; do git -C "$repo" worktree remove --force "$out/$v" 2>/dev/null || true; done
  [ -n "${OUT:-}" ] || rm -rf "$out"
}
trap cleanup EXIT
git -C "$repo" worktree add -q --detach "$out/base" "$base"
git -C "$repo" worktree add -q --detach "$out/new" "$new"

run() {  # variant core repetition
  (cd "$out/$1" && OMP_NUM_THREADS=1 taskset -c "$2" "$python" "$script" --torch-threads 1 \
    --actor "$actor" --iterations "$iters" --eval-every 0 --eval-episodes 8 --checkpoint-every 0 \
    --output-dir "$out/runs/$1/rep$3" "${flags[@]}" > "$out/runs/$1-rep$3.log" 2>&1) || {
    echo "$1 ($script) failed: see $out/runs/$1-rep$3.log" >&2
    tail -5 "$out/runs/$1-rep$3.log" >&2
    return 1
  }
}
mkdir -p "$out/runs"
for r in $(seq 1 "$reps"); do
  if [ $((r % 2)) = 1 ]; then a=0 b=1; else a=1 b=0; fi
  echo "repetition $r/$reps: $base on core $a, $new on core $b"
  run base "$a" "$r" &
  pid=$!
  run new "$b" "$r"
  wait "$pid"
done
"$python" - "$out/runs" "$base" "$new" <<'EOF'
import glob, json, os, statistics, sys

runs, names = sys.argv[1], dict(base=sys.argv[2], new=sys.argv[3])
total = {}
for v in ("base", "new"):
    times = []
    for path in sorted(glob.glob(os.path.join(runs, v, "rep*", "*", "summary.json"))):
        rep = path.split(os.sep)[-3]
        for h in json.load(open(path))["history"]:
            times.append(h["charts/iteration_time_s"])
            print(f"{v} ({names[v]}) {rep} iteration {h['iteration']}: {times[-1]:.2f} s")
    total[v] = times
    print(f"{v} ({names[v]}): {len(times)} iterations, total {sum(times):.1f} s, median "
          f"{statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f})")
print(f"ratio base / new: {sum(total['base']) / sum(total['new']):.3f} (totals), "
      f"{statistics.median(total['base']) / statistics.median(total['new']):.3f} (medians)")
EOF
