#!/usr/bin/env bash
# Every fast-tier learning test's margin (its gain over k standard errors, tests/helpers.py
# assert_margin) under the four ways a new machine may run the tier: two pytest-xdist workers
# (the README's command) and one process, each with OMP_NUM_THREADS=1 and =2. The learning tests
# run at one torch thread whatever the setting (tests/conftest.py), so the four columns should
# agree on one machine; another CPU's float kernels still move them. Writes FILE.jsonl per
# setting under OUT (default runs/test_margins) and prints the table docs/usage.md "Tests" holds.
#   bash benchmark/test_margins.sh [OUT]       (~75 minutes on two cores: the two -n 0 runs together)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/test_margins}
mkdir -p "$out"
run() {  # name, OMP_NUM_THREADS, pytest's -n
  rm -f "$out/$1.jsonl"
  OMP_NUM_THREADS=$2 TURNRL_MARGINS="$out/$1.jsonl" python -m pytest -q -p no:cacheprovider \
    -k test_learning -n "$3" >"$out/$1.log" 2>&1 || true
  tail -n 1 "$out/$1.log"
}
# one process at one torch thread each (learning tests), so two of them share the two cores
run n0_omp1 1 0 & run n0_omp2 2 0 & wait
run n2_omp1 1 2
run n2_omp2 2 2
python - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
cols = ["n2_omp1", "n2_omp2", "n0_omp1", "n0_omp2"]
rows = {}  # (test, the assertion's place in it) -> {setting: row}
for c in cols:
    f = out / f"{c}.jsonl"
    seen = {}
    for line in f.read_text().splitlines() if f.exists() else []:
        r = json.loads(line)
        name = r["test"].removeprefix("tests/")
        seen[name] = seen.get(name, 0) + 1
        rows.setdefault((name, seen[name]), {})[c] = r
head = [f"-n {c[1]}, OMP_NUM_THREADS={c[-1]}" for c in cols]
print("| learning test (assertion) | asserted | " + " | ".join(head) + " |")
print("|---|---:|" + "---:|" * len(cols))
for (name, i), by in rows.items():
    k = next(iter(by.values()))["k"]
    cells = [f"{by[c]['value']:+.3g} ± {by[c]['se']:.2g} (**{by[c]['margin']:.1f}**)" if c in by else "–" for c in cols]
    print(f"| `{name}` ({i}) | > {k} s.e. | " + " | ".join(cells) + " |")
PY
