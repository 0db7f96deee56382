"""Issue 55: what lets the `tiny` actor copy an identifier from the page? Lever 1, the tokenizer:

The tiny actor's tokenizer (train_tiny_tokenizer, the same in every script) is byte-level BPE split
only at newlines, so merges cross word and bracket boundaries: WebShop's page line `[B0M2WSW6P8]`
and the command `click[B0M2WSW6P8]` are different token sequences, and the copy has no token to
start from. This trains the tokenizer on each env's corpus under three pre-tokenisations and
measures, on scripted episodes:

  newline  today's: split at newlines only (must equal train_tiny_tokenizer; checked here)
  words    newline, then a word with its leading space ([A-Za-z0-9_'-]+) or one other character
           as its own piece: words never merge with their neighbours
  gpt2     GPT-2's byte-level regex

per env: the mean tokens of the episode's last observation (the sequence-length cost), the mean
tokens of an action, and, where an action copies an argument from the page (WebShop `click[...]`,
ALFWorld's objects and receptacles), how many copies are token-for-token: the action's tokens that
cover the argument start and end on its characters (a leading space allowed) and occur contiguously
in the observation's ids. --write-actor writes an actor folder with a chosen split, positions
(lever 2: learned as `tiny`, or rotary) and synthetic copy pretraining (lever 4, --copy-steps).
It needs none of the scripts' code: the scripts load the actor it writes with --actor DIR.
Counting a trained actor's valid clicks plays the scripts' own rollout, so it is an experiment:
experiments/copy_clicks.py (`python experiments/copy_clicks.py ACTOR --env webshop`).

    python benchmark/tokenizer_copy.py                       # every env (35 s for the 20Q subset)
    python benchmark/tokenizer_copy.py --envs webshop alfworld_pick --episodes 10
    python benchmark/tokenizer_copy.py --envs webshop --write-actor ws_words  # --actor ws_words
    python benchmark/tokenizer_copy.py --envs webshop --write-actor ws_copy --positions rotary \
        --copy-steps 1000                 # levers 2 and 4: rotary positions, copy pretraining
"""

import argparse
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import envs  # noqa: E402

SPLITS = {
    "newline": [r"\n"],
    "words": [r"\n", r" ?[A-Za-z0-9_'-]+| ?[^\sA-Za-z0-9_'-]|\s+"],
    "gpt2": None,  # byte-level's own regex
}
VERBS = "take|put|go to|open|close|heat|cool|clean|use|examine"
ALFWORLD_ARG = re.compile(rf"(?:{VERBS}) (.+?)(?: (?:from|in/on|with) .*)?$")


def tokenizer(texts, split: str, vocab_size: int = 1024):
    """The tiny tokenizer's BPE (vocabulary, special token, byte alphabet as train_tiny_tokenizer)
    under the pre-tokenisation `split` (a key of SPLITS)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers as pre, trainers
    from transformers import PreTrainedTokenizerFast

    tok, special = Tokenizer(models.BPE()), "<|endoftext|>"
    if SPLITS[split] is None:
        tok.pre_tokenizer = pre.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pieces = [pre.Split(Regex(r), behavior="isolated") for r in SPLITS[split]]
        byte_level = pre.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.pre_tokenizer = pre.Sequence([*pieces, byte_level])
    kw = dict(special_tokens=[special], show_progress=False)
    kw["initial_alphabet"] = pre.ByteLevel.alphabet()
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, **kw))
    specials = dict.fromkeys(("eos_token", "pad_token", "bos_token", "unk_token"), special)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **specials)


def write_actor(name: str, split: str, corpus: int, out: str, positions="learned", copy_steps=0):
    """An actor folder in the scripts' `tiny` shape (4 layers, 128 wide) whose tokenizer uses
    `split`: `--actor OUT` trains it with any script. positions: `learned` (GPT-2, 512 absolute
    positions, as `tiny`) or `rotary` (Llama, lever 2: "attend one back" is the same relation at
    every position); copy_steps > 0 pretrains it on copy_sequences first (lever 4)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    texts = envs.corpus(name, corpus)
    tok = tokenizer(texts, split)
    eos, shape = tok.eos_token_id, dict(n_positions=512, n_embd=128, n_layer=4, n_head=4)
    ids = dict(vocab_size=len(tok), bos_token_id=eos, eos_token_id=eos)
    if positions == "learned":
        zero = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # as the scripts' no_dropout
        model = GPT2LMHeadModel(GPT2Config(**ids, **shape, **zero))
    else:  # GPT-2's parameters less its position table (MLP 3 x 128 x 344 ~ 2 x 128 x 512);
        # n_embd is the key the scripts read to treat a saved actor as tiny (its defaults)
        wide = dict(hidden_size=128, intermediate_size=344, num_hidden_layers=4, n_embd=128)
        config = LlamaConfig(**ids, **wide, num_attention_heads=4, num_key_value_heads=4)
        config.max_position_embeddings, config.tie_word_embeddings = 1024, True
        model = LlamaForCausalLM(config)
    if copy_steps:
        copy_pretrain(model, tok, texts, copy_steps)
    model.save_pretrained(out)
    tok.save_pretrained(out)


def copy_sequences(stream, n: int, rng, max_len: int = 64):
    """n synthetic copy examples (lever 4), each (ids, k): [window A][span S][window B][S again],
    A and B windows of the env's token stream, S k tokens drawn from it at random (k in 4..32,
    the rest random): S's repeat is only predictable by finding S earlier (an induction head), at
    a distance that varies. Measured on webshop (scratch runs, 2026-11-28): S a window of text
    taught a copy that the text's own statistics carry (72% of a repeat, none of a code's blocks);
    sequences of ≤ 128 tokens at batch 32, lr 1e-3 did not form the head in 1,500 steps."""

    def window(size):
        i = rng.randrange(len(stream) - size)
        return stream[i : i + size]

    out = []
    for _ in range(n):
        k = rng.randint(4, 32)
        a = rng.randint(0, (max_len - 2 * k) // 2)
        span = [rng.choice(stream) for _ in range(k)]
        out.append((window(a) + span + window(rng.randint(0, max_len - 2 * k - a)) + span, k))
    return out


def copy_pretrain(model, tok, texts, steps: int, seed: int = 0):
    """AdamW on next-token loss over every token of copy_sequences from the env's texts, in two
    phases: `steps` at ≤ 64 tokens, batch 64, lr 3e-3 (where the head forms), then steps/6 at
    ≤ 448 tokens, batch 16, lr 1e-3 (so it reaches across a page). Position ids start at a random
    offset so a learned table trains everywhere. Prints repeat_accuracy on 64 held-out sequences
    of the phase, five times a phase."""
    import random

    import torch

    rng, stream = random.Random(seed), []
    for t in texts:
        stream += tok(t + "\n", add_special_tokens=False)["input_ids"]
    for max_len, batch, lr, n in ((64, 64, 3e-3, steps), (448, 16, 1e-3, steps // 6)):
        opt, test = (
            torch.optim.AdamW(model.parameters(), lr=lr),
            copy_sequences(stream, 64, rng, max_len),
        )
        for step in range(1, n + 1):
            seqs = [s for s, _ in copy_sequences(stream, batch, rng, max_len)]
            width = max(map(len, seqs))
            ids = torch.tensor([s + [tok.pad_token_id] * (width - len(s)) for s in seqs])
            real = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
            pos = torch.tensor([[rng.randint(0, 512 - width)] for _ in seqs]) + torch.arange(width)
            logits = model(input_ids=ids, attention_mask=real, position_ids=pos).logits[:, :-1]
            target = ids[:, 1:].masked_fill(real[:, 1:] == 0, -100)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step % max(1, n // 5) == 0 or step == n:
                acc = repeat_accuracy(model, test)
                print(
                    f"copy step {step}/{n} (≤ {max_len} tokens)  loss {loss.item():.3f}  "
                    f"repeat accuracy {acc:.3f}",
                    flush=True,
                )


def repeat_accuracy(model, seqs):
    """Greedy next-token accuracy on the repeated span of each (ids, k), past its first token."""
    import torch

    ok = total = 0
    with torch.no_grad():
        for s, k in seqs:
            ids = torch.tensor([s])
            ok += (model(input_ids=ids).logits[0, -k:-1].argmax(-1) == ids[0, -k + 1 :]).sum()
            total += k - 1
    return int(ok) / total


def copied_argument(name: str, action: str):
    """The part of `action` the page must supply: WebShop's click target, ALFWorld's object."""
    m = re.fullmatch(r"click\[(.*)\]", action)
    if m:
        return m.group(1)
    m = ALFWORLD_ARG.fullmatch(action) if name.startswith("alfworld") else None
    return m.group(1) if m else None


def copies_token_for_token(tok, obs: str, action: str, arg: str) -> bool:
    """The action's tokens covering `arg` start and end on its characters (one leading space
    allowed) and occur contiguously in the observation's ids."""
    enc = tok(action + "\n", add_special_tokens=False, return_offsets_mapping=True)
    lo = action.index(arg)
    hi = lo + len(arg)
    pieces = zip(enc["input_ids"], enc["offset_mapping"])
    span = [(t, x, y) for t, (x, y) in pieces if x < hi and y > lo]  # the tokens covering arg
    if not span or span[0][1] < lo - 1 or span[-1][2] > hi:
        return False
    ids, page = [t for t, _, _ in span], tok(obs, add_special_tokens=False)["input_ids"]
    return any(page[i : i + len(ids)] == ids for i in range(len(page) - len(ids) + 1))


def measure(name: str, episodes: int, corpus: int, splits=tuple(SPLITS)):
    """{split: dict(obs=mean last-observation tokens, act=mean action tokens, copies=(ok, of))}."""
    texts, trajs = envs.corpus(name, corpus), envs.collect_scripted(name, episodes)
    eps = [[(st["observation"], st["action"]) for st in t["steps"]] for t in trajs]
    out = {}
    for split in splits:
        tok = tokenizer(texts, split)
        n_ids = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])  # noqa: E731
        obs = [n_ids(steps[-1][0]) for steps in eps]
        act = [n_ids(a + "\n") for steps in eps for _, a in steps]
        ok = total = 0
        for o, a in (step for steps in eps for step in steps):
            arg = copied_argument(name, a)
            if arg and arg in o:
                total += 1
                ok += copies_token_for_token(tok, o, a, arg)
        out[split] = dict(obs=sum(obs) / len(obs), act=sum(act) / len(act), copies=(ok, total))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--envs", nargs="+", default=envs.names(), choices=envs.names(), help="envs")
    p.add_argument("--episodes", type=int, default=30, help="scripted episodes per env")
    p.add_argument("--corpus", type=int, default=3000, help="texts the tokenizer trains on")
    p.add_argument("--out", default="", help="also write the table (markdown) here")
    p.add_argument("--write-actor", default="", help="write an actor with --split here")
    p.add_argument("--split", default="words", choices=list(SPLITS), help="for --write-actor")
    p.add_argument(
        "--positions",
        default="learned",
        choices=["learned", "rotary"],
        help="for --write-actor: GPT-2's learned table (as tiny) or Llama's rotary",
    )
    p.add_argument(
        "--copy-steps",
        type=int,
        default=0,
        help="for --write-actor: synthetic copy pretraining steps (0: untrained)",
    )
    a = p.parse_args(argv)
    if a.episodes < 1 or a.corpus < 1 or a.copy_steps < 0:
        p.error("--episodes and --corpus must be at least 1, --copy-steps at least 0")  # exit 2
    if a.write_actor and len(a.envs) != 1:
        p.error("--write-actor needs one env in --envs")  # exit 2
    if (a.copy_steps or a.positions != "learned") and not a.write_actor:
        p.error("--positions and --copy-steps shape the actor that --write-actor DIR writes")
    if a.write_actor:
        return write_actor(a.envs[0], a.split, a.corpus, a.write_actor, a.positions, a.copy_steps)
    lines = ["| env | last observation, tokens: newline → words (×) / gpt2 | action tokens: "]
    lines[0] += "newline → words | copies token-for-token: newline → words / gpt2 |"
    lines.append("|---|---|---|---|")
    for name in a.envs:
        t0 = time.time()
        try:
            r = measure(name, a.episodes, a.corpus)
        except (ImportError, OSError, RuntimeError) as e:  # a missing package or binary
            print(f"{name}: skipped ({e})", flush=True)
            continue
        nl, w, g = r["newline"], r["words"], r["gpt2"]
        cop = lambda x: f"{x['copies'][0]}/{x['copies'][1]}"  # noqa: E731
        copies = f"{cop(nl)} → {cop(w)} / {cop(g)}" if nl["copies"][1] else "–"
        lines.append(
            f"| {name} | {nl['obs']:.0f} → {w['obs']:.0f} ({w['obs'] / nl['obs']:.1f}×) / "
            f"{g['obs']:.0f} | {nl['act']:.1f} → {w['act']:.1f} | {copies} |"
        )
        print(lines[-1], f"({time.time() - t0:.0f} s)", flush=True)
    if a.out:
        open(a.out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
