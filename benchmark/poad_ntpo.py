"""POAD's comparison in miniature: POAD (BAD backup) vs NTPO (the naive token-level backup) at equal
episode budgets, from one BC start, plus POAD with the authors' critic (frozen LM + head).

    python benchmark/poad_ntpo.py --seeds 1 2 3   # CPU: tiny actor, 10-word Twenty Questions
    python benchmark/poad_ntpo.py --summary       # mean ± s.e. per variant from finished runs

(Named poad_ntpo.py, not poad.py: tests put benchmark/ on sys.path, where a poad.py would shadow
the algorithm file.)

1. The BC start: filtered_bc.py offline with rho = 1.0 (plain BC on 2,000 scripted episodes of
   --env, seed 1), saved to <out>/bc/ (as benchmark/online.py does); every variant and seed starts
   from this one actor (--bc-actor to reuse another).
2. Every variant x seed runs poad.py with the same budget of online episodes (--budget, 64
   rollouts per iteration), evaluated every --eval-every-episodes on --eval-episodes fixed episodes
   (common random numbers: the same env seeds, targets and sampling seed for every run), into
   <out>/<variant>/seed<k>/. A finished run is skipped, so an interrupted benchmark continues.

Variants (poad.py's defaults otherwise):
  poad         --backup bad   --critic actor     the BAD token GAE (Eq. 14)
  ntpo         --backup ntpo  --critic actor     γ per token (Eq. 10), = ppo_token.py's GAE
  poad_base_lm --backup bad   --critic base_lm   App. J's critic: frozen reference LM + MLP head
  poad_gamma088 --backup bad  --gamma 0.884      γ per action matched to NTPO's γ^L (L ≈ 2.4)

Action-length ablation (the paper: POAD's edge grows with action length): --tiny-vocab 400 trains
the tiny actor's tokenizer with 400 instead of 1,024 entries (fewer merges), so a question is ~8
tokens instead of ~2.4 (same model, same env), e.g.
    python benchmark/poad_ntpo.py --tiny-vocab 400 --out runs/benchmark/poad_long

Other envs: --env overcooked_tomato_salad / virtualhome_food_preparation (the BC start uses each
env's scripted policy). GPU scale (App. J), e.g. --actor smollm2-135m --extra "--lora-r 8
--bc-steps 0 --lr 1e-6 --value-lr 5e-5 --ent-coef 0.01 --max-grad-norm 0.5 --value-clip 0.2
--device cuda"."""

import argparse
import json
import math
import os
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from online import bc_start, find_run, run_pool  # noqa: E402  (benchmark/online.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PER_ITER = 64  # poad.py's default rollouts per iteration
VARIANTS = {
    "poad": ["--backup", "bad", "--critic", "actor"],
    "ntpo": ["--backup", "ntpo", "--critic", "actor"],
    "poad_base_lm": ["--backup", "bad", "--critic", "base_lm"],
    # γ per action = NTPO's effective γ per question (0.95^2.4 for the tiny tokenizer's 2.4 tokens)
    "poad_gamma088": ["--backup", "bad", "--critic", "actor", "--gamma", "0.884"],
}


def tiny_with_vocab(vocab: int, env: str, out: str):
    """A randomly initialised `tiny` actor (poad.py's shape, seed 1) whose tokenizer has `vocab`
    entries, saved to <out>/tiny_vocab<vocab>/ (loadable with --actor); the BC start trains it.
    The tokenizer is benchmark/tokenizer_copy.py's `newline` split: the same BPE as the scripts'
    train_tiny_tokenizer (tests/test_benchmark.py checks the ids), without importing a script."""
    path = os.path.join(out, f"tiny_vocab{vocab}")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    sys.path.insert(0, ROOT)  # envs/
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import envs
    from tokenizer_copy import tokenizer

    tok = tokenizer(envs.corpus(env, 3000), "newline", vocab_size=vocab)
    torch.manual_seed(1)
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=512,
        n_embd=128,
        n_layer=4,
        n_head=4,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def variant_command(variant, seed, actor, a):
    out = os.path.join(a.out, variant, f"seed{seed}")
    cmd = [
        sys.executable,
        "poad.py",
        *VARIANTS[variant],
        "--actor",
        actor,
        "--bc-steps",
        "0",
        "--env",
        a.env,
        "--seed",
        str(seed),
        "--iterations",
        str(a.budget // PER_ITER),
        "--rollouts-per-iter",
        str(PER_ITER),
        "--eval-every",
        str(a.eval_every_episodes // PER_ITER),
        "--eval-episodes",
        str(a.eval_episodes),
        "--checkpoint-every",
        "0",
        "--torch-threads",
        str(a.threads),
        "--output-dir",
        out,
        *shlex.split(a.extra),
    ]
    return out, cmd


def summarize(a):
    """Per variant: start → end sampled eval return, the paired difference (same episodes) and its
    s.e. per seed, and the mean ± s.e. over seeds of the final return and of the difference."""
    rows = {}
    for variant in VARIANTS:
        for seed in a.seeds:
            run = find_run(os.path.join(a.out, variant, f"seed{seed}"))
            if run is None:
                continue
            s = json.load(open(os.path.join(run, "summary.json")))
            d = [x - y for x, y in zip(s["eval_returns"], s["start_eval_returns"])]
            m = sum(d) / len(d)
            se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))
            rows.setdefault(variant, []).append(
                (seed, s["start_eval_return"], s["eval_return"], m, se, s["wall_time_s"])
            )
    lines = []
    for variant, rs in rows.items():
        for seed, start, end, m, se, wall in rs:
            lines.append(
                f"{variant:13s} seed {seed}: {start:.2f} -> {end:.2f} "
                f"(paired {m:+.2f} ± {se:.2f}), {wall:.0f} s"
            )
        ends, diffs = [r[2] for r in rs], [r[3] for r in rs]

        def mse(x):
            mu = sum(x) / len(x)
            s = (
                math.sqrt(sum((v - mu) ** 2 for v in x) / (len(x) - 1) / len(x))
                if len(x) > 1
                else 0
            )
            return mu, s

        (me, se_e), (md, se_d) = mse(ends), mse(diffs)
        lines.append(
            f"{variant:13s} {len(rs)} seeds: final {me:.2f} ± {se_e:.2f}, "
            f"change {md:+.2f} ± {se_d:.2f} (mean ± s.e. over seeds)"
        )
    print("\n".join(lines))
    return rows


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--variants", nargs="+", default=["poad", "ntpo"], choices=list(VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds per variant")
    p.add_argument("--env", default="twenty_questions_subset", help="environment (envs.make name)")
    p.add_argument("--actor", default="tiny", help="model the BC start is trained from")
    p.add_argument("--tiny-vocab", type=int, default=0, help="tiny tokenizer size (0: 1,024)")
    p.add_argument("--bc-actor", default="", help="a saved actor to start from instead of BC")
    p.add_argument("--bc-steps", type=int, default=800, help="BC steps of the start")
    p.add_argument("--bc-lr", type=float, default=1e-3, help="BC learning rate")
    p.add_argument("--budget", type=int, default=320, help="online episodes per run (× 64)")
    p.add_argument("--eval-every-episodes", type=int, default=64, help="evaluation interval")
    p.add_argument("--eval-episodes", type=int, default=200, help="episodes per evaluation")
    p.add_argument("--jobs", type=int, default=2, help="runs at once")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--extra", default="", help="flags passed to every poad.py run")
    p.add_argument("--summary", action="store_true", help="only print the finished runs' summary")
    p.add_argument(
        "--out", default=os.path.join(ROOT, "runs", "benchmark", "poad"), help="where runs go"
    )
    a = p.parse_args()
    a.out = os.path.abspath(a.out)
    if a.budget % PER_ITER or a.eval_every_episodes % PER_ITER:
        raise SystemExit(f"--budget and --eval-every-episodes must be multiples of {PER_ITER}")
    if a.summary:
        summarize(a)
        return
    t0 = time.time()
    if not a.bc_actor and a.tiny_vocab and find_run(os.path.join(a.out, "bc")) is None:
        a.actor = tiny_with_vocab(a.tiny_vocab, a.env, a.out)
    actor = bc_start(a, a.threads, ["--torch-threads", str(a.threads)])
    print(f"BC start: {actor}", flush=True)
    jobs = []
    for seed in a.seeds:  # seed-major: an interrupted benchmark has whole pairs
        for variant in a.variants:
            out, cmd = variant_command(variant, seed, actor, a)
            if find_run(out) is None:
                jobs.append((f"{variant} seed {seed}", out, cmd))
    failed = run_pool(jobs, a.jobs, a.threads)
    print(f"{len(jobs) - len(failed)} runs done, {len(failed)} failed, {time.time() - t0:.0f}s")
    summarize(a)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
