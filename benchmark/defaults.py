"""Every script's default run as a new user runs it, checked against the bar of docs/benchmark.md
"Default runs": `python <script>.py --seed S` (no other flag, default threads), one run at a time,
finishes within 10 minutes and its result line shows a gain beyond 2 paired standard errors (the
start and the end evaluated on the same episodes).

    python benchmark/defaults.py                       # all nine scripts, seed 1 (~1 h on 2 cores)
    python benchmark/defaults.py --seeds 1 2 3 --scripts archer filtered_bc

Each run goes to <out>/<script>/seed<S>/ (its log beside it); a run whose summary.json exists is
not run again (delete it to re-measure). Prints the table (markdown) and writes it to --table;
exit status 1 if a run misses the bar. Run it alone: a second job on the 2 cores slows both."""

import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import envs  # noqa: E402

SCRIPTS = ["filtered_bc", "archer", "archer_offline", "chai", "ppo_token", "poad", "qsft", "ilql"]
SCRIPTS += ["gigpo"]
MINUTES, SE = 10.0, 2.0  # the bar: at most this many minutes, a gain beyond this many s.e.


def judge(summary: dict, seconds: float) -> dict:
    """One run's row: minutes, start → end (mean returns), the paired gain ± s.e., and the bar."""
    gain, se = envs.paired_difference(summary["eval_returns"], summary["start_eval_returns"])
    start, end = summary["start_eval_return"], summary["eval_return"]
    ok = seconds <= 60 * MINUTES and gain > SE * se
    return dict(minutes=seconds / 60, start=start, end=end, gain=gain, se=se, ok=ok)


def table(rows) -> str:
    """Markdown: one line per (script, seed)."""
    out = ["| script | seed | minutes | start → end | paired gain ± s.e. | meets the bar |"]
    out.append("|---|---|---|---|---|---|")
    for (script, seed), r in rows.items():
        out.append(
            f"| {script}.py | {seed} | {r['minutes']:.1f} | {r['start']:.2f} → {r['end']:.2f} | "
            f"{r['gain']:+.2f} ± {r['se']:.2f} ({r['gain'] / r['se']:.1f} s.e.) | "
            f"{'yes' if r['ok'] else 'no'} |"
        )
    return "\n".join(out)


def run_one(script: str, seed: int, out: str, flags: list[str]) -> dict:
    """The default run of one script and seed (or the finished one found in `out`): its row."""
    d = os.path.abspath(os.path.join(out, script, f"seed{seed}"))
    found = glob.glob(os.path.join(d, "*", "summary.json"))
    if not found:
        os.makedirs(d, exist_ok=True)
        cmd = [sys.executable, f"{script}.py", "--seed", str(seed), "--output-dir", d, *flags]
        print("$ " + shlex.join(cmd), flush=True)
        t0 = time.time()
        with open(os.path.join(d, "log.txt"), "w") as log:
            done = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        json.dump({"seconds": time.time() - t0}, open(os.path.join(d, "time.json"), "w"))
        if done.returncode != 0:
            raise SystemExit(f"{script}.py --seed {seed} failed: see {d}/log.txt")
        found = glob.glob(os.path.join(d, "*", "summary.json"))
    seconds = json.load(open(os.path.join(d, "time.json")))["seconds"]
    return judge(json.load(open(found[0])), seconds)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scripts", nargs="+", default=SCRIPTS, choices=SCRIPTS, help="which scripts")
    p.add_argument("--seeds", nargs="+", type=int, default=[1], help="seeds (default: 1)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs/benchmark/defaults"), help="the runs")
    table_md = os.path.join(ROOT, "benchmark/results/defaults.md")
    p.add_argument("--table", default=table_md, help="the table's file (markdown)")
    p.add_argument("--flags", default="", help="extra flags for every run (tests only)")
    a = p.parse_args(argv)
    rows = {}
    for seed in a.seeds:
        for script in a.scripts:
            rows[script, seed] = run_one(script, seed, a.out, shlex.split(a.flags))
            print(table({(script, seed): rows[script, seed]}).splitlines()[-1], flush=True)
    head = f"`python benchmark/defaults.py`, {time.strftime('%Y-%m-%d')}, one run at a time:\n\n"
    text = head + table(rows)
    os.makedirs(os.path.dirname(os.path.abspath(a.table)), exist_ok=True)
    open(a.table, "w").write(text + "\n")
    print(text)
    return 0 if all(r["ok"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
