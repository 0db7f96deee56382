"""Collect the benchmark runs into tables (CSV + Markdown) and plots (PNG).

    python benchmark/report.py                                 # runs/benchmark -> benchmark/results

Reads every run's summary.json and TensorBoard scalars under --runs:
  online*/<method>/seed<k>/<run>/      benchmark/online.py        -> <group>.csv, <group>.md,
                                                                     <group>_curves.png (online:
                                                                     20Q; online_gmc: Guess My City)
  offline/<row>/seed<k>/<run>/         benchmark/offline_table.py -> offline.csv, offline.md
  qsft*/<game>/<method>/seed<k>/<run>/ benchmark/offline_qsft.py -> <group>_<game>.csv/.md
  throughput/throughput.json           experiments/throughput.py  -> throughput.md
  timing/<method>/seed1/<run>/         benchmark/timing.py        -> timing.csv, timing.md
  poad*/<variant>/seed<k>/<run>/       benchmark/poad_ntpo.py     -> <group>.md, <group>_curves.png
and writes results.md (all tables, with the commit and date) to --results. Missing parts are left
out.

The online threshold is fixed by a rule chosen before any run: halfway between the BC start (the BC
actor's sampled evaluation at 0 episodes, averaged over all runs) and the best seed-averaged
evaluation return any method reaches at any point (the last point averages the in-loop and the final
evaluation). "Episodes to threshold" is the first evaluation point at which a method's seed-averaged
return is at or above it ("> budget" if never)."""

import argparse
import csv
import datetime
import glob
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # offline_table.VARIANTS
LABELS = {
    "archer": "ArCHer",
    "archer_baseline": "ArCHer + baseline",
    "archer_target_adv": "ArCHer, A from the target critic",
    "chai": "CHAI",
    "filtered_bc": "Filtered BC",
    "ppo_token": "Token-level PPO",
    "gigpo": "GiGPO",
    "grpo": "GRPO (GiGPO with ω = 0)",
    "graphgpo": "GraphGPO (GiGPO with --step-credit graph)",
    "archer_offline": "ArCHer offline (IQL + AWR)",
    "poad": "POAD (BAD)",
    "ntpo": "NTPO",
    "poad_base_lm": "POAD, base_lm critic",
    "poad_gamma088": "POAD, γ 0.884 per action",
}


# --------------------------------------------------------------------------------------------------
# loading


def scalars(run_dir):
    """{tag: [(step, value, wall_time), ...]} from the TensorBoard event files of one run (in
    <run>/<wandb project>/, where accelerate's tracker writes them; older runs: in <run>/)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted(glob.glob(os.path.join(run_dir, "**", "events.out.tfevents*"), recursive=True))
    folder = os.path.dirname(events[0]) if events else run_dir
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def load_group(root):
    """Runs under root/<name>/seed<k>/<run>/: {name: [{"seed", "summary", "scalars", "dir"}, ...]}
    (finished runs only)."""
    out = {}
    if not os.path.isdir(root):
        return out
    for name in sorted(os.listdir(root)):
        for sd in (
            sorted(os.listdir(os.path.join(root, name)))
            if os.path.isdir(os.path.join(root, name))
            else []
        ):
            if not sd.startswith("seed") or not os.path.isdir(os.path.join(root, name, sd)):
                continue
            for run in sorted(os.listdir(os.path.join(root, name, sd))):
                d = os.path.join(root, name, sd, run)
                if os.path.exists(os.path.join(d, "summary.json")):
                    out.setdefault(name, []).append(
                        {
                            "seed": int(sd[4:]),
                            "dir": d,
                            "scalars": scalars(d),
                            "summary": json.load(open(os.path.join(d, "summary.json"))),
                        }
                    )
    return out


# --------------------------------------------------------------------------------------------------
# statistics


def mean_std(xs):
    m = sum(xs) / len(xs)
    return m, (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else None


FINAL = {"eval/episodic_return": "eval_return", "eval/success_rate": "eval_success_rate"}


def mean_se(xs):
    """Mean and standard error of the mean (None for one value)."""
    m, sd = mean_std(xs)
    return m, (sd / len(xs) ** 0.5 if sd is not None else None)


def start_returns(summary):
    """Per-episode returns of the run's starting policy on its evaluation episodes: the BC actor
    alone (CHAI: without the critic's choice; filtered BC: its offline evaluation)."""
    if "actor_eval_returns" in summary:
        return summary["actor_eval_returns"]
    if "start_eval_returns" in summary:
        return summary["start_eval_returns"]
    return summary["offline_eval"]["returns"]


def paired_change(summary):
    """Mean over the evaluation episodes of (final − start) return: the same episodes and sampling
    seed at both ends (common random numbers), so the policy's change without most of the noise."""
    end, start = summary["eval_returns"], start_returns(summary)
    return sum(e - b for e, b in zip(end, start)) / len(end)


def eval_points(run, tag):
    """{episodes: value} of one run's evaluations: the in-loop ones and the final one of
    summary.json (the scripts skip the in-loop evaluation at the last iteration; were both there,
    they would be the same number: evaluation is deterministic)."""
    pts = {s: v for s, v, _ in run["scalars"].get(tag, [])}
    last, key = run["summary"].get("episodes"), FINAL.get(tag)
    if key in run["summary"] and last is not None:
        pts[last] = run["summary"][key]
    return pts


def curve(runs, tag="eval/episodic_return"):
    """Seed-averaged curve at the steps every run logged: [(episodes, mean, min, max), ...]."""
    per_run = [eval_points(r, tag) for r in runs]
    steps = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    return [
        (
            s,
            sum(p[s] for p in per_run) / len(per_run),
            min(p[s] for p in per_run),
            max(p[s] for p in per_run),
        )
        for s in steps
    ]


def bc_start(runs):
    """The BC actor's sampled evaluation at 0 episodes. CHAI logs it as eval/actor_episodic_return
    (its eval/episodic_return at 0 is already re-ranked by the untrained critic); the other scripts
    as eval/episodic_return."""
    vals = []
    for r in runs:
        sc = r["scalars"]
        tag = (
            "eval/actor_episodic_return"
            if "eval/actor_episodic_return" in sc
            else "eval/episodic_return"
        )
        vals += [v for s, v, _ in sc.get(tag, []) if s == 0]
    return sum(vals) / len(vals) if vals else float("nan")


def threshold(online):
    """Halfway between the BC start and the best seed-averaged evaluation return of any method at
    any point."""
    start = bc_start([r for runs in online.values() for r in runs])
    best = max(m for runs in online.values() for _, m, _, _ in curve(runs))
    return start + 0.5 * (best - start), start, best


def episodes_to(curve_points, level):
    """First evaluation point (episodes) whose seed-averaged return is >= level; None if none is."""
    return next((s for s, m, _, _ in curve_points if m >= level), None)


def iteration_time(run, tag="charts/episodic_return"):
    """Median seconds between consecutive logs of `tag` (one per iteration) from TensorBoard's wall
    times."""
    times = sorted(w for _, _, w in run["scalars"].get(tag, []))
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return gaps[len(gaps) // 2] if gaps else float("nan")


def fmt(m, s=None, nd=2):
    return (
        "n/a"
        if m is None or (isinstance(m, float) and math.isnan(m))
        else (f"{m:.{nd}f}" + (f" ± {s:.{nd}f}" if s is not None else ""))
    )


def write_table(rows, header, path):
    """rows of dicts -> path.csv and a Markdown string (also written to path.md)."""
    with open(path + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows({k: r.get(k, "") for k in header} for r in rows)
    md = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    md += "".join("| " + " | ".join(str(r.get(k, "")) for k in header) + " |\n" for r in rows)
    with open(path + ".md", "w") as f:
        f.write(md)
    return md


# --------------------------------------------------------------------------------------------------
# the three reports


def online_report(online, results, name="online"):
    """The online comparison of one env (a folder online*/ of benchmark/online.py runs) ->
    <name>.csv, <name>.md and <name>_curves.png."""
    level, start, best = threshold(online)
    budget = max(r["summary"]["episodes"] for runs in online.values() for r in runs)
    rows, reach = [], {}
    for method, runs in online.items():
        c = curve(runs)
        reach[method] = episodes_to(c, level)
        ret = mean_se([r["summary"]["eval_return"] for r in runs])
        change = mean_se([paired_change(r["summary"]) for r in runs])
        succ = mean_std([r["summary"]["eval_success_rate"] for r in runs])
        greedy = [
            r["summary"]["eval_return_greedy"] for r in runs if "eval_return_greedy" in r["summary"]
        ]
        rows.append(
            {
                "method": LABELS.get(method, method),
                "seeds": len(runs),
                "episodes": runs[0]["summary"]["episodes"],
                "final return (± s.e.)": fmt(*ret),
                "change from the BC start (± s.e.)": fmt(*change),
                "final success": fmt(succ[0]),
                "greedy return": fmt(mean_std(greedy)[0]) if greedy else "n/a",
                "best eval return": fmt(max(m for _, m, _, _ in c)) if c else "n/a",
                "episodes to threshold": reach[method]
                if reach[method] is not None
                else f"> {budget}",
                "wall time per run (s)": fmt(
                    mean_std([r["summary"]["wall_time_s"] for r in runs])[0], nd=0
                ),
            }
        )
    header = [
        "method",
        "seeds",
        "episodes",
        "final return (± s.e.)",
        "change from the BC start (± s.e.)",
        "final success",
        "greedy return",
        "best eval return",
        "episodes to threshold",
        "wall time per run (s)",
    ]
    md = write_table(rows, header, os.path.join(results, name))
    md += (
        f"\nBC start (sampled) {start:.2f}; best seed-averaged evaluation {best:.2f}; "
        f"threshold (halfway) {level:.2f}.\n"
    )
    a, p = reach.get("archer"), reach.get("ppo_token")
    if a is not None and "ppo_token" in reach:
        md += (
            f"PPO / ArCHer episodes to threshold: {p / max(a, 1):.1f}×\n"
            if p is not None
            else f"PPO / ArCHer episodes to threshold: > {budget / max(a, 1):.1f}× "
            f"(PPO did not reach it in {budget})\n"
        )
    plot_online(online, level, start, os.path.join(results, f"{name}_curves.png"))
    return md


def plot_online(online, level, start, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, tag, name in [
        (axes[0], "eval/episodic_return", "evaluation return"),
        (axes[1], "eval/success_rate", "evaluation success rate"),
    ]:
        for method, runs in online.items():
            c = curve(runs, tag)
            if not c:
                continue
            x = [s for s, *_ in c]
            ax.plot(
                x,
                [m for _, m, _, _ in c],
                marker="o",
                ms=3,
                label=f"{LABELS.get(method, method)} ({len(runs)} seeds)",
            )
            ax.fill_between(x, [lo for *_, lo, _ in c], [hi for *_, hi in c], alpha=0.15)
        if "archer" in online:  # the end of ArCHer's critic-only warm-up
            args = online["archer"][0]["summary"]["args"]
            if args.get("warmup_iters"):
                ax.axvline(
                    args["warmup_iters"] * args["rollouts_per_iter"],
                    color="tab:blue",
                    ls=":",
                    lw=1,
                    label="ArCHer: end of critic warm-up"
                    if tag == "eval/episodic_return"
                    else None,
                )
        if tag == "eval/episodic_return" and level is not None:
            ax.axhline(level, color="grey", ls="--", lw=1, label=f"threshold {level:.2f}")
        if tag == "eval/episodic_return":
            ax.axhline(start, color="black", ls=":", lw=1, label=f"BC start {start:.2f}")
        ax.set_xlabel("online environment episodes")
        ax.set_ylabel(name + " (sampled)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    env = next(iter(online.values()))[0]["summary"]["args"].get("env", "")
    fig.suptitle(f"{env}: mean over seeds, shaded min-max", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def poad_report(group, name, results):
    """POAD vs NTPO (benchmark/poad_ntpo.py): per variant the start and final sampled evaluation,
    mean ± s.e. over seeds, and the paired change (the same evaluation episodes at the start and
    the end, mean ± s.e. over seeds); curves as the online comparison's."""
    rows = []
    # the Overcooked / VirtualHome returns lie in about [0, 1.4]: two decimals would hide the change
    starts = [r["summary"]["start_eval_return"] for runs in group.values() for r in runs]
    nd = 3 if all(abs(x) < 5 for x in starts) else 2
    for variant, runs in group.items():
        s = [r["summary"] for r in runs]
        change = [paired_change(x) for x in s]
        rows.append(
            {
                "variant": LABELS.get(variant, variant),
                "seeds": len(s),
                "episodes": s[0]["episodes"],
                "start return": fmt(mean_se([x["start_eval_return"] for x in s])[0], nd=nd),
                "final return (± s.e.)": fmt(*mean_se([x["eval_return"] for x in s]), nd=nd),
                "change (± s.e.)": fmt(*mean_se(change), nd=nd),
                "final success": fmt(mean_se([x["eval_success_rate"] for x in s])[0]),
                "greedy return": fmt(mean_se([x["eval_return_greedy"] for x in s])[0], nd=nd),
                "wall time per run (s)": fmt(mean_se([x["wall_time_s"] for x in s])[0], nd=0),
            }
        )
    md = write_table(rows, list(rows[0]), os.path.join(results, name))
    start = bc_start([r for runs in group.values() for r in runs])
    plot_online(group, None, start, os.path.join(results, f"{name}_curves.png"))
    return md


def offline_report(offline, results):
    from offline_table import VARIANTS  # key -> (row label, script, flags, paper's return)

    rows = []
    for key in sorted(
        offline, key=lambda k: list(VARIANTS).index(k) if k in VARIANTS else len(VARIANTS)
    ):
        s = [r["summary"] for r in offline[key]]
        label, _, _, paper = VARIANTS.get(key, (key, "", [], ""))
        rows.append(
            {
                "method": label,
                "seeds": len(s),
                "return (± s.e.)": fmt(*mean_se([x["eval_return"] for x in s])),
                "success": fmt(mean_std([x["eval_success_rate"] for x in s])[0]),
                "greedy return": fmt(mean_std([x["eval_return_greedy"] for x in s])[0]),
                "paper (20Q return)": paper,
            }
        )
    return write_table(rows, list(rows[0]), os.path.join(results, "offline"))


def policy_steps(args):
    """The policy's gradient steps in an offline_qsft.py run: Q-SFT's --bc-steps (π_φ), filtered
    BC's --offline-steps, else iterations × updates per iteration (ILQL; ArCHer offline's actor)."""
    per = args.get("updates_per_iter") or args.get("actor_updates_per_iter") or 0
    return args.get("bc_steps") or args.get("offline_steps") or (args.get("iterations") or 0) * per


def qsft_report(game, runs, results, name="qsft"):
    """One game of the Q-SFT Table 1 in miniature: each method's sampled return (mean ± s.e. over
    seeds), success (± its binomial s.e. over every seed's evaluation games) sampled and greedy,
    minutes per run, and the paper's number where it has one. Q-SFT's own π_φ (its SFT start, on
    the same episodes) is a row too. Written to <name>_<game>.md/.csv (name: the runs' group, e.g.
    qsft3000 for a --steps 3000 benchmark with --out runs/benchmark/qsft3000)."""
    from offline_qsft import METHODS, PAPER

    def success(summaries, key):
        """Mean success rate ± the binomial s.e. of all the runs' games (none: no game count)."""
        p = sum(x.get(key, math.nan) for x in summaries) / len(summaries)
        games = sum(x.get("eval_episodes") or 0 for x in summaries)
        return fmt(p, (p * (1 - p) / games) ** 0.5 if games and not math.isnan(p) else None)

    rows = []
    for key in [k for k in METHODS if k in runs]:
        s = [r["summary"] for r in runs[key]]
        rows.append(
            {
                "method": METHODS[key][0],
                "seeds": len(s),
                "return (± s.e.)": fmt(*mean_se([x["eval_return"] for x in s])),
                "success": success(s, "eval_success_rate"),
                "greedy return": fmt(
                    mean_std([x.get("eval_return_greedy", math.nan) for x in s])[0]
                ),
                "greedy success": success(s, "eval_success_rate_greedy"),
                "minutes per run": fmt(sum(x["wall_time_s"] for x in s) / len(s) / 60, nd=0),
                "paper (Table 1)": PAPER.get(game, {}).get(key, ""),
                "Q-SFT − its π_φ (paired)": "",
            }
        )
        if key == "qsft":  # the gain over its own SFT start on the same episodes, per seed
            avg = lambda v: sum(v) / len(v)  # noqa: E731
            gain = [avg(x["eval_returns"]) - avg(x["start_eval_returns"]) for x in s]
            if len(s) == 1:  # one seed: the paired difference's s.e. over its episodes
                gain = [a - b for a, b in zip(s[0]["eval_returns"], s[0]["start_eval_returns"])]
            rows[-1]["Q-SFT − its π_φ (paired)"] = fmt(*mean_se(gain))
            rows.append(
                {
                    "method": "Q-SFT's π_φ (β = 0)",
                    "seeds": len(s),
                    "return (± s.e.)": fmt(*mean_se([x["start_eval_return"] for x in s])),
                    "success": success(s, "start_eval_success_rate"),
                    "greedy return": "n/a",
                    "greedy success": "n/a",
                    "minutes per run": "(in Q-SFT's)",
                    "paper (Table 1)": "",
                    "Q-SFT − its π_φ (paired)": "",
                }
            )
        if key == "ilql":  # π_β alone (β = 0): the same LM, the same episodes
            rows.append(
                {
                    "method": "ILQL's π_β (β = 0)",
                    "seeds": len(s),
                    "return (± s.e.)": fmt(*mean_se([x["start_eval_return"] for x in s])),
                    "success": success(s, "start_eval_success_rate"),
                    "greedy return": fmt(
                        mean_std([x["behavior_eval_greedy"]["return"] for x in s])[0]
                    ),
                    "greedy success": success(
                        [{**x, **x["behavior_eval_greedy"]} for x in s], "success_rate"
                    ),
                    "minutes per run": "(in ILQL's)",
                    "paper (Table 1)": "",
                    "Q-SFT − its π_φ (paired)": "",
                }
            )
    md = write_table(rows, list(rows[0]), os.path.join(results, f"{name}_{game}"))
    if "qsft" in runs:
        plot_qsft(runs["qsft"], game, os.path.join(results, f"{name}_{game}_curves.png"))
        md += f"\n![Q-SFT training curves]({name}_{game}_curves.png)\n"
    return md


def plot_qsft(runs, game, path):
    """Q-SFT's training per seed: π_φ's Eq. (2) NLL per utterance, then Eq. (3)'s mean target w
    and mean p_θ(a|s) of the data tokens (logged per iteration of --updates-per-iter steps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(runs):
        color, per = f"C{i}", r["summary"]["args"].get("updates_per_iter", 1)
        nll = r["scalars"].get("losses/bc_nll", [])
        steps, values = [x[0] for x in nll], [x[1] for x in nll]  # since issue 70: one point
        axes[0].plot(steps, values, color=color, lw=0.8, marker=".", label=f"seed {r['seed']}")
        for tag, ls, what in [
            ("values/target", "-", "target w"),
            ("values/likelihood", "--", "p_θ"),
        ]:
            v = r["scalars"].get(tag, [])
            axes[1].plot([x[0] * per for x in v], [x[1] for x in v], color=color, ls=ls,
                         label=f"{what}, seed {r['seed']}")  # fmt: skip
    axes[0].set(xlabel="Eq. (2) step", ylabel="π_φ NLL per utterance (Eq. 2)", yscale="log")
    axes[1].set(xlabel="Eq. (3) step", ylabel="mean over the batch's action tokens")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Q-SFT on {game}: behaviour cloning, then the likelihood model", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def throughput_report(tp, timing, results):
    md = ""
    if tp:
        rows = [
            {
                "model": t["model"],
                "episodes (batch)": t["episodes"],
                "turns": t.get("max_turns", 20),
                "batches": t.get("repeats", 1),
                "generate calls": t["calls"],
                "tokens": t["tokens"],
                "rollout path tok/s": fmt(t["rollout_tok_s"], nd=0),
                "bare generate tok/s": fmt(t["bare_tok_s"], nd=0),
                "share of rollout time in generate": f"{100 * t['generate_share']:.0f}%",
                "fraction of the model's arithmetic limit": (
                    f"{100 * t['arithmetic_fraction']:.0f}% ({fmt(t['achieved_gflop_s'], nd=1)} of "
                    f"{fmt(t['matmul_gflop_s'], nd=1)} GFLOP/s)"
                    if "arithmetic_fraction" in t
                    else "not measured"
                ),
            }
            for t in tp
        ]
        md += write_table(rows, list(rows[0]), os.path.join(results, "throughput"))
    if timing:
        rows = []
        for method, runs in timing.items():
            r = runs[0]
            per_iter = r["summary"]["args"].get("rollouts_per_iter", 0)
            tag = "charts/episodic_return" if per_iter else "losses/q_loss"
            t = iteration_time(r, tag)
            rows.append(
                {
                    "method": LABELS.get(method, method),
                    "rollouts per iteration": per_iter or "0 (offline)",
                    "seconds per iteration": fmt(t, nd=1),
                    "seconds per online episode": fmt(t / per_iter, nd=2) if per_iter else "n/a",
                }
            )
        md += "\n" + write_table(rows, list(rows[0]), os.path.join(results, "timing"))
    return md


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", default=os.path.join(ROOT, "runs", "benchmark"))
    p.add_argument("--results", default=os.path.join(ROOT, "benchmark", "results"))
    a = p.parse_args()
    os.makedirs(a.results, exist_ok=True)
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
            or "unknown"
        )
    except OSError:
        commit = "unknown"
    parts = [
        f"# Benchmark results\n\nMeasured at commit {commit} "
        f"on {datetime.date.today().isoformat()} (`python benchmark/report.py`).\n"
    ]
    groups = sorted(os.listdir(a.runs)) if os.path.isdir(a.runs) else []
    for name in [d for d in groups if d.startswith("online")]:  # online, online_gmc, ...
        online = load_group(os.path.join(a.runs, name))
        online.pop("bc", None)
        if online:
            env = next(iter(online.values()))[0]["summary"]["args"].get("env", "")
            parts.append(
                f"## Online (ArCHer Fig. 3 in miniature): {env}\n\n"
                f"![online curves]({name}_curves.png)\n\n" + online_report(online, a.results, name)
            )
    offline = load_group(os.path.join(a.runs, "offline"))
    if offline:
        parts.append(
            "## Offline (ArCHer Table 1 in miniature)\n\n" + offline_report(offline, a.results)
        )
    qsft_groups = [
        d for d in groups if d.startswith("qsft") and os.path.isdir(os.path.join(a.runs, d))
    ]
    for name in qsft_groups:  # qsft, qsft3000, ...
        for game in sorted(os.listdir(os.path.join(a.runs, name))):
            runs = load_group(os.path.join(a.runs, name, game))
            if runs:
                args = [r["summary"]["args"] for v in runs.values() for r in v]
                steps = max(policy_steps(x) for x in args)
                parts.append(
                    f"## Offline, Q-SFT Table 1 in miniature: {game} ({steps} steps per policy)"
                    "\n\n" + qsft_report(game, runs, a.results, name)
                )
    tp_file = os.path.join(a.runs, "throughput", "throughput.json")
    tp = json.load(open(tp_file)) if os.path.exists(tp_file) else []
    timing = load_group(os.path.join(a.runs, "timing"))
    if tp or timing:
        parts.append("## Throughput\n\n" + throughput_report(tp, timing, a.results))
    for name in [d for d in groups if d.startswith("poad")]:
        group = load_group(os.path.join(a.runs, name))
        group.pop("bc", None)
        if group:
            parts.append(
                f"## POAD vs NTPO ({name})\n\n![curves]({name}_curves.png)\n\n"
                + poad_report(group, name, a.results)
            )
    with open(os.path.join(a.results, "results.md"), "w") as f:
        f.write("\n".join(parts))
    print("\n".join(parts))
    print(f"-> {a.results}/results.md")


if __name__ == "__main__":
    main()
