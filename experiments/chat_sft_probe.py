"""Does chat-form SFT on the scripted conversations learn? Held-out NLL and success vs BC steps.

    python experiments/chat_sft_probe.py --torch-threads 1                  # LoRA r 8, lr 2e-4
    python experiments/chat_sft_probe.py --lr 2e-3 --checkpoints 0 50 100   # a higher lr

SmolLM2-135M-Instruct (the packaged smollm2-135m) in its chat template on the 10-word Twenty
Questions, trained by the scripts' own BC path: filtered_bc.py's warm_start_data (scripted
episodes as conversations), sample_pairs and bc_step (tokenize_pairs, pad_pairs,
action_logprobs, nll_loss), the same in all nine scripts. At each checkpoint (BC steps done):
- the NLL per action token of held-out scripted conversations (other env seeds than the training
  data; every pair of --heldout-episodes episodes), on the exact ids tokenize_pairs gives, each
  episode one packed sequence; the mean over pairs of the pair's NLL per action token, its s.e.
  clustered by episode; the NLL of the end-of-turn token alone beside it;
- greedy and sampled (temperature 1) evaluation on --eval-episodes fixed episodes (filtered_bc's
  evaluate: the scripts' evaluation seeds), success rate and return;
- seconds per BC step (this process, --torch-threads threads).
A probe of the scripts' internals (it imports filtered_bc.py), so it lives in experiments/; the
table goes to --out (benchmark/results/chat_sft.md; a run appends its block)."""

import argparse
import os
import platform
import random
import sys
import time
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import envs  # noqa: E402
import filtered_bc as fbc  # noqa: E402

HELD_OUT_SEED = 10**5  # env seeds of the held-out episodes (training data: --seed, --seed + 1, ...)


def heldout_episodes(args, tok, n_episodes: int):
    """n_episodes held-out scripted conversations (env seeds from HELD_OUT_SEED, not the
    training data's), packed (one sequence each, tokenize_pairs' ids)."""
    data = envs.collect_scripted(args.env, n_episodes, HELD_OUT_SEED, max_turns=args.max_turns)
    data = envs.chat_episodes(data, fbc.chat_format(tok, args.system_prompt))
    return [packed(tok, t, args.max_obs_tokens) for t in data]


@torch.no_grad()
def heldout_nll(model, tok, held):
    """(mean over held-out pairs of the pair's NLL per action token, its s.e. clustered by
    episode, mean NLL of the end-of-turn token): action_token_logprobs on each packed episode."""
    per_episode, eot, n = [], [], 0
    for full, spans in held:
        batch = fbc.pad_pairs([(full, [])], tok.pad_token_id, "right")
        logp = torch.log_softmax(model(input_ids=batch.input_ids).logits[0, :-1].float(), -1)
        tok_nll = -logp.gather(-1, batch.input_ids[0, 1:, None])[:, 0]  # of id t+1 at t
        pairs = [tok_nll[a - 1 : b - 1] for a, b in spans]
        per_episode.append([float(x.mean()) for x in pairs])
        eot += [float(x[-1]) for x in pairs]
    n = sum(len(e) for e in per_episode)
    mean = sum(map(sum, per_episode)) / n
    # s.e. of a ratio estimator over episodes (pairs of one episode are not independent)
    k = len(per_episode)
    resid = torch.tensor([sum(e) - mean * len(e) for e in per_episode], dtype=torch.float64)
    se = float(resid.std() * k**0.5 / n)
    return mean, se, sum(eot) / len(eot)


def packed(tok, episode, max_obs_tokens: int):
    """One episode's conversation as one sequence: the ids of its last (observation, action) pair
    from tokenize_pairs, and the columns of every pair's action ids. Exact: each pair's ids are a
    prefix of the last's (prompts are appended, never re-rendered; asserted), so one forward pass
    gives every pair's action log-probs as tokenize_pairs' ids would."""
    steps = episode["steps"]
    obs, acts = [s["observation"] for s in steps], [s["action"] for s in steps]
    pairs = fbc.tokenize_pairs(tok, obs, acts, max_obs_tokens)
    full = pairs[-1][0] + pairs[-1][1]
    spans = []
    for o, a in pairs:
        assert full[: len(o) + len(a)] == o + a, "truncated (--max-obs-tokens): not packable"
        spans.append((len(o), len(o) + len(a)))
    return full, spans


def packed_step(model, tok, optimizer, episodes, max_obs_tokens: int, max_grad_norm: float = 1.0):
    """nll_loss (the mean over pairs of -log pi(a|s)) over every pair of `episodes`, each episode
    one sequence (packed): bc_step's objective per pair, ~turns/2 times cheaper per pair. Returns
    (loss, pairs)."""
    optimizer.zero_grad(set_to_none=True)
    seqs = [packed(tok, t, max_obs_tokens) for t in episodes]
    n_pairs = sum(len(sp) for _, sp in seqs)
    total = 0.0
    for full, spans in seqs:
        act = [False] * len(full)
        for a, b in spans:
            act[a:b] = [True] * (b - a)
        batch = fbc.pad_pairs([(full, [])], tok.pad_token_id, "right")
        mask = torch.tensor([act])
        logp, _ = fbc.action_token_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.position_ids, mask
        )
        loss = -logp.sum() / n_pairs
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return total, n_pairs


@torch.no_grad()
def check_packed(model, tok, episode, max_obs_tokens: int):
    """Max |packed - per-pair| action-token log-prob on one episode (the per-pair ids are
    tokenize_pairs', scored by pad_pairs + action_token_logprobs as bc_step does)."""
    steps = episode["steps"]
    pairs = fbc.tokenize_pairs(
        tok, [s["observation"] for s in steps], [s["action"] for s in steps], max_obs_tokens
    )
    per_pair, _ = fbc.action_token_logprobs(model, *fbc.pad_pairs(pairs, tok.pad_token_id))
    full, spans = packed(tok, episode, max_obs_tokens)
    act = [False] * len(full)
    for a, b in spans:
        act[a:b] = [True] * (b - a)
    batch = fbc.pad_pairs([(full, [])], tok.pad_token_id)
    one, _ = fbc.action_token_logprobs(
        model, batch.input_ids, batch.attention_mask, batch.position_ids, torch.tensor([act])
    )
    return float((one - per_pair).abs().max()), len(pairs)


def evaluate(model, tok, args, greedy: bool):
    """filtered_bc's evaluate, under either signature: (model, tokenizer, args, greedy) before the
    plumbing's refactor, (play, args) after it (play: run_episodes with the model, greedy set)."""
    import functools
    import inspect

    if "play" in inspect.signature(fbc.evaluate).parameters:
        play = functools.partial(fbc.run_episodes, model, tok, args, greedy=greedy)
        return fbc.evaluate(play, args)
    return fbc.evaluate(model, tok, args, greedy=greedy)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--checkpoints",
        type=int,
        nargs="+",
        default=[0, 60, 200, 400],
        help="in steps of --batch-size pairs (packed: pairs seen / batch size)",
    )
    p.add_argument(
        "--eval-at",
        type=int,
        nargs="*",
        default=None,
        help="checkpoints with the rollout evaluation (default: all)",
    )
    p.add_argument("--eval-modes", nargs="+", default=["greedy", "sampled"])
    p.add_argument(
        "--bc-step",
        action="store_true",
        help="train with the scripts' bc_step (--batch-size random pairs a step); "
        "default: packed, 2 whole episodes a step (same per-pair objective)",
    )
    p.add_argument("--lr", type=float, default=2e-4, help="the BC lr (--preset paper's: 2e-4)")
    p.add_argument("--lora-r", type=int, default=8, help="0: full fine-tuning")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--scripted-episodes", type=int, default=2000)
    p.add_argument("--heldout-episodes", type=int, default=40)
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--no-eval", action="store_true", help="held-out NLL only (no rollouts)")
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--system-prompt", default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--label", default="")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmark/results/chat_sft.md"))
    cli = p.parse_args()
    torch.set_num_threads(cli.torch_threads)
    args = fbc.Args(
        env="twenty_questions_subset",
        actor="smollm2-135m",
        chat="on",
        lora_r=cli.lora_r,
        max_turns=cli.max_turns,
        system_prompt=cli.system_prompt,
        scripted_episodes=cli.scripted_episodes,
        eval_episodes=cli.eval_episodes,
        seed=cli.seed,
        device="cpu",
    )
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    model, tok = fbc.load_actor(args.actor, args)
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in trainable)
    optimizer = torch.optim.AdamW(trainable, lr=cli.lr)
    data = fbc.warm_start_data(args, tok)
    held = heldout_episodes(args, tok, cli.heldout_episodes)
    acc = fbc.Accelerator(cpu=True)
    run = types.SimpleNamespace(args=args, acc=acc, tokenizer=tok)
    rng = random.Random(args.seed * 7919)
    what = f"LoRA r {cli.lora_r}" if cli.lora_r else "full fine-tuning"
    head = f"{what}, lr {cli.lr:g}, batch {cli.batch_size}"
    n_held = sum(len(sp) for _, sp in held)
    print(f"{head}: {n_train:,} trainable parameters; {n_held} held-out pairs", flush=True)
    if not cli.bc_step:
        err, n = check_packed(
            model, tok, max(data[:50], key=lambda t: len(t["steps"])), args.max_obs_tokens
        )
        print(f"packed vs per-pair log-probs on a {n}-turn episode: max |diff| {err:.2e}")
        assert err < 1e-3
        head += f", packed (2 episodes a step; packed = per-pair to {err:.0e})"
    rows, done, pairs_seen, train_s, losses = [], 0, 0, 0.0, []
    for target in sorted(set(cli.checkpoints)):
        while pairs_seen < target * cli.batch_size:
            t0 = time.perf_counter()
            if cli.bc_step:
                pairs = fbc.sample_pairs(data, cli.batch_size, rng, acc)
                loss, grad_norm = fbc.bc_step(run, model, optimizer, pairs)
                n = len(pairs)
            else:
                episodes = [data[rng.randrange(len(data))] for _ in range(2)]
                loss, n = packed_step(model, tok, optimizer, episodes, args.max_obs_tokens)
            train_s += time.perf_counter() - t0
            done, pairs_seen = done + 1, pairs_seen + n
            losses.append(loss)
            if done % 10 == 0:
                print(
                    f"  step {done} ({pairs_seen} pairs): batch nll/pair {loss:.3f}, "
                    f"{train_s / pairs_seen:.2f} s/pair",
                    flush=True,
                )
        model.eval()
        t0 = time.perf_counter()
        nll, se, eot = heldout_nll(model, tok, held)
        row = dict(steps=target, pairs=pairs_seen, nll=nll, se=se, eot=eot)
        row |= dict(nll_s=time.perf_counter() - t0, train_s=train_s)
        if not cli.no_eval and (cli.eval_at is None or target in cli.eval_at):
            for mode in cli.eval_modes:
                greedy = mode == "greedy"
                t0 = time.perf_counter()
                ev = evaluate(model, tok, args, greedy)
                row |= {f"{mode}_success": ev["success_rate"], f"{mode}_return": ev["return"]}
                row |= {f"{mode}_return_se": ev["return_se"], f"{mode}_s": time.perf_counter() - t0}
                print(f"  {mode}: {ev['example']['steps'][0]['action']!r} ...", flush=True)
        model.train()
        row["s_per_step"] = cli.batch_size * train_s / pairs_seen if done else float("nan")
        row["last10_loss"] = sum(losses[-10:]) / max(1, len(losses[-10:]))
        rows.append(row)
        print(row, flush=True)
        write(cli, head, n_train, rows)


def write(cli, head, n_train, rows):
    """Append (or rewrite, while running) this run's block of --out."""
    cols = "| BC steps (× batch pairs) | pairs seen | train s | held-out NLL / action token "
    cols += "(± s.e., "
    cols += "by episode) | end-of-turn NLL | greedy success (return) | sampled success (return ± "
    cols += "s.e.) | s / step of batch pairs | batch NLL / pair (last 10) |"
    lines = [f"### {cli.label or head}", "", cols, "|" + "---|" * 9]
    for r in rows:
        g = s = "–"
        if "greedy_success" in r:
            g = f"{r['greedy_success']:.2f} ({r['greedy_return']:+.2f})"
        if "sampled_success" in r:
            s = f"{r['sampled_success']:.2f} ({r['sampled_return']:+.2f} ± "
            s += f"{r['sampled_return_se']:.2f})"
        lines.append(
            f"| {r['steps']} | {r['pairs']} | {r['train_s']:.0f} | {r['nll']:.3f} ± {r['se']:.3f} "
            f"| {r['eot']:.3f} | {g} | {s} | "
            f"{r['s_per_step']:.1f} | {r['last10_loss']:.2f} |"
        )
    cmd = "python experiments/chat_sft_probe.py " + " ".join(sys.argv[1:])
    lines += [
        "",
        f"`{cmd}` ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{torch.get_num_threads()} torch thread(s); {head}, {n_train:,} trainable parameters; "
        f"{cli.scripted_episodes} scripted training episodes (seed {cli.seed}), held-out: "
        f"every pair of {cli.heldout_episodes} episodes at env seeds from "
        f"{HELD_OUT_SEED}; {cli.eval_episodes} evaluation episodes).",
        "",
    ]
    block = "\n".join(lines)
    path, marker = cli.out, f"<!-- run {os.getpid()} -->"
    title = "# Chat-form SFT on the 10-word Twenty Questions (issue 80)\n\n"
    old = open(path).read() if os.path.exists(path) else title
    if marker in old:
        old = old[: old.index(marker)]
    with open(path, "w") as f:
        f.write(old + marker + "\n" + block)


if __name__ == "__main__":
    main()
