"""KV reuse across turns, measured against the machine's limit for the same model.

    python experiments/kv_reuse.py                      # SmolLM2 chat: 20Q subset and ALFWorld
    python experiments/kv_reuse.py --profile            # and where one decode step's time goes

For each env: the scripts' rollouts (filtered_bc.py's run_episodes, the same in every script)
with the rollout's KV cache (every turn computes only what the cache lacks) and without it (every
turn prefills the whole conversation again: generate_actions with cache=None), on the same
episodes (same seed; the script checks that both sampled the same ids); then the same model in
plain transformers calls on the same machine, at the same batch: one forward pass over the last
turn's prompts (the prefill rate) and a bare decode loop with the KV cache (greedy, no stopping,
no env: the decode rate, the limit a rollout can approach). The actor is the packaged
SmolLM2-135M-Instruct with its chat template and a LoRA adapter (r 8), as a user runs it.

A probe of the scripts' internals (it imports filtered_bc.py), so it lives in experiments/; the
table goes to benchmark/results/kv_reuse.md (--out). Run it alone: two processes on two cores
halve each other's rates."""

import argparse
import dataclasses
import os
import platform
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import envs  # noqa: E402
import filtered_bc as fbc  # noqa: E402


def rollouts(model, tok, args, n, reuse):
    """n episodes through run_episodes (reuse) or with generate_actions(cache=None): the
    trajectories, seconds, turns, sampled tokens and the work generate did: the prompt columns it
    computed (batch x columns not read off the cache) and its decode steps (batch x steps)."""
    stop_ids, work, generate = fbc.stop_token_ids(tok), [0, 0], model.generate

    def counted(**kw):
        past = kw["past_key_values"]  # generate extends it: its length before the call
        rows, width = kw["input_ids"].shape
        work[0] += rows * (width - (past.get_seq_length() if past is not None else 0))
        out = generate(**kw)
        work[1] += rows * (out.sequences.shape[1] - width - 1)  # the first token is the prefill's
        return out

    def act(observations, candidates):
        return fbc.generate_actions(model, tok, observations, args, stop_ids)[:2]

    torch.manual_seed(0)
    model.generate = counted
    t0 = time.perf_counter()
    if reuse:
        trajs, _ = fbc.run_episodes(model, tok, args, range(n))
    else:
        chat = fbc.chat_format(tok, args.system_prompt)
        trajs = envs.run_episodes(
            args.env, range(n), act, None, None, max_turns=args.max_turns, chat=chat
        )
    seconds = time.perf_counter() - t0
    del model.generate
    tokens = sum(len(s["action_ids"]) for t in trajs for s in t["steps"])
    turns = max(len(t["steps"]) for t in trajs)
    return trajs, seconds, turns, tokens, work


@torch.no_grad()
def bare_rates(model, tok, args, trajs, repeats=2):
    """(prefill tokens/s, decode tokens/s, last prompts' mean length): one forward pass over the
    last turn's prompts of the episodes (left-padded, their real tokens counted), and a decode
    loop of max_new_tokens greedy steps with the KV cache from the first turn's prompts."""
    last = [t["steps"][-1]["observation"] for t in trajs]
    first = [t["steps"][0]["observation"] for t in trajs]
    pairs = fbc.tokenize_pairs(tok, last, [""] * len(last), args.max_obs_tokens)
    ids, attn, pos, _ = fbc.pad_pairs([(o, []) for o, _ in pairs], tok.pad_token_id, "left")
    length, prefill = int(attn.sum()) / len(ids), []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model(input_ids=ids, attention_mask=attn, position_ids=pos)
        prefill.append(int(attn.sum()) / (time.perf_counter() - t0))
    pairs = fbc.tokenize_pairs(tok, first, [""] * len(first), args.max_obs_tokens)
    ids, attn, pos, _ = fbc.pad_pairs([(o, []) for o, _ in pairs], tok.pad_token_id, "left")
    decode = []
    for _ in range(repeats):
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
        past, mask, step = out.past_key_values, attn, pos[:, -1:]
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(args.max_new_tokens):
            mask, step = torch.cat([mask, torch.ones_like(nxt)], 1), step + 1
            out = model(input_ids=nxt, attention_mask=mask, position_ids=step, past_key_values=past)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        decode.append(len(ids) * args.max_new_tokens / (time.perf_counter() - t0))
    return max(prefill), max(decode), length


@torch.no_grad()
def profile_decode_step(model, tok, args, trajs, rows=12):
    """torch.profiler's table of one decode step at the rollout's batch (its top `rows` ops)."""
    first = [t["steps"][0]["observation"] for t in trajs]
    pairs = fbc.tokenize_pairs(tok, first, [""] * len(first), args.max_obs_tokens)
    ids, attn, pos, _ = fbc.pad_pairs([(o, []) for o, _ in pairs], tok.pad_token_id, "left")
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    mask = torch.cat([attn, torch.ones_like(nxt)], 1)
    kw = dict(input_ids=nxt, attention_mask=mask, position_ids=pos[:, -1:] + 1)
    with torch.profiler.profile() as prof:
        model(**kw, past_key_values=out.past_key_values)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=["twenty_questions_subset", "alfworld_pick"])
    p.add_argument("--episodes", type=int, default=16, help="episodes per rollout (the batch)")
    p.add_argument("--turns", type=int, default=8, help="max_turns of every episode")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument("--dtype", default="float32", help="float32 or bfloat16 (the actor's weights)")
    p.add_argument("--profile", action="store_true", help="print one decode step's op table")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmark/results/kv_reuse.md"))
    cli = p.parse_args()
    header = (
        "| env | what | seconds | turns | sampled tokens | tokens/s | vs. bare decode | prompt "
    )
    header += "tokens computed | decode steps × rows | seconds at the bare rates (share) |"
    rows = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for env in cli.envs:
        args = fbc.Args(env=env, actor="smollm2-135m", chat="on", lora_r=cli.lora_r, device="cpu")
        args = dataclasses.replace(args, max_turns=cli.turns, max_new_tokens=cli.max_new_tokens)
        args = dataclasses.replace(args, dtype=cli.dtype)
        torch.manual_seed(0)
        model, tok = fbc.load_actor(args.actor, args)
        model.eval()
        runs = {reuse: rollouts(model, tok, args, cli.episodes, reuse) for reuse in (False, True)}
        same = [[[s["action_ids"] for s in t["steps"]] for t in r[0]] for r in runs.values()]
        prefill, decode, length = bare_rates(model, tok, args, runs[True][0])
        for reuse, (_, seconds, turns, tokens, (computed, steps)) in runs.items():
            what = "run_episodes, KV reused across turns" if reuse else "run_episodes, no reuse"
            rate, bare = tokens / seconds, computed / prefill + steps / decode
            row = f"| {env} | {what} | {seconds:.1f} | {turns} | {tokens:,} | {rate:.1f} | "
            row += f"{rate / decode:.0%} | {computed:,} | {steps:,} | {bare:.1f} "
            rows.append(row + f"({bare / seconds:.0%}) |")
        gain = runs[False][1] / runs[True][1]
        same = "the same episodes" if same[0] == same[1] else "other episodes (rounding)"
        rows.append(f"| {env} | reuse: speed-up | | | | {gain:.2f}x, {same} | | | | |")
        what = f"bare prefill, the last turn's prompts (mean {length:.0f} tokens)"
        rows.append(f"| {env} | {what} | | | | {prefill:.0f} processed | | | | |")
        what = "bare decode loop with the KV cache"
        rows.append(f"| {env} | {what} | | | | {decode:.1f} | 100% | | | |")
        print("\n".join(rows[-5:]), flush=True)
        if cli.profile:
            print(profile_decode_step(model, tok, args, runs[True][0]), flush=True)
    threads = torch.get_num_threads()
    cpu = platform.processor() or platform.machine()
    note = (
        f"\n\n`python experiments/kv_reuse.py` ({time.strftime('%Y-%m-%d')}, {cpu}, {threads} "
        f"torch threads, {cli.episodes} episodes of up to {cli.turns} turns, max_new_tokens "
        f"{cli.max_new_tokens}, SmolLM2-135M-Instruct chat, LoRA r {cli.lora_r}, {cli.dtype})."
    )
    os.makedirs(os.path.dirname(cli.out), exist_ok=True)
    with open(cli.out, "w") as f:
        f.write("# KV reuse across turns\n\n" + "\n".join(rows) + note + "\n")
    print(f"wrote {cli.out}")


if __name__ == "__main__":
    main()
