"""What does behaviour cloning on Guess My City need at CPU scale? One BC run per hypothesis.

    python benchmark/gmc_bc.py               # every variant, seed 1 (~50 min on 2 cores)
    python benchmark/gmc_bc.py --variants base steps1600

The Twenty Questions recipe (filtered_bc.py offline, rho 1.0: 800 steps of batch 64 at lr 1e-3 on
2,000 scripted episodes of the data policy) applied to Guess My City, and one change at a time:
  base      the recipe as is: `tiny` (GPT-2 4 layers x 128, byte-level BPE of 1,024 tokens)
  steps1600 2x the steps (1,600: what the Guess My City commands in the docs use)
  steps2400 3x the steps
  lr3e-3    3x the learning rate
  data      4x the data (8,000 episodes) and 4x the steps
  vocab4k   a BPE of 4,096 tokens on the same env text (more merges, still split at newlines only)
  words4k   a BPE of 4,096 tokens split at words, GPT-2 style (city names become whole tokens;
            sequences about 3x longer)
  wide      6 layers x 256 (about 5x the parameters), the same tokenizer
Every run is evaluated on the same --eval-episodes episodes (sampled) and written to
runs/benchmark/gmc_bc/<variant>/; the table (success, return, parameters, time) goes to stdout and
benchmark/results/gmc_bc.md. Model variants are saved as local folders (--actor <folder>), so the
algorithm scripts need no new flags for this measurement: it runs them only through their command
line and reads each run's summary.json."""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tokenizer_copy.tokenizer
ENV = "guess_my_city"
VARIANTS = {  # name -> (model: (layers, width, vocab, split), BC steps, lr, scripted episodes)
    "base": ((4, 128, 1024, "lines"), 800, 1e-3, 2000),
    "steps1600": ((4, 128, 1024, "lines"), 1600, 1e-3, 2000),
    "steps2400": ((4, 128, 1024, "lines"), 2400, 1e-3, 2000),
    "lr3e-3": ((4, 128, 1024, "lines"), 800, 3e-3, 2000),
    "data": ((4, 128, 1024, "lines"), 3200, 1e-3, 8000),
    "vocab4k": ((4, 128, 4096, "lines"), 800, 1e-3, 2000),
    "words4k": ((4, 128, 4096, "words"), 800, 1e-3, 2000),
    "wide": ((6, 256, 1024, "lines"), 800, 1e-3, 2000),
}


def make_actor(layers, width, vocab, split, path):
    """A fresh GPT-2 of this shape with a BPE of `vocab` tokens on the env's text, saved to `path`
    (filtered_bc.py's `tiny` is layers 4, width 128, vocab 1024). The BPE is benchmark/
    tokenizer_copy.py's: split `lines` is its `newline` (the scripts' train_tiny_tokenizer, the
    same ids), `words` its `gpt2` (GPT-2's word pre-split), so no script is imported."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import envs
    from tokenizer_copy import tokenizer

    texts = envs.corpus(ENV, 3000)
    tok = tokenizer(texts, {"lines": "newline", "words": "gpt2"}[split], vocab_size=vocab)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=512,
        n_embd=width,
        n_layer=layers,
        n_head=4,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-episodes", type=int, default=200)
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "benchmark", "gmc_bc"))
    a = p.parse_args()
    rows = []
    for name in a.variants:
        (layers, width, vocab, split), steps, lr, episodes = VARIANTS[name]
        out = os.path.join(a.out, name)
        summary_path = os.path.join(out, "summary.json")
        if not os.path.exists(summary_path):
            actor = os.path.join(out, "init")
            n_params = make_actor(layers, width, vocab, split, actor)
            cmd = [sys.executable, os.path.join(ROOT, "filtered_bc.py"), "--env", ENV]
            cmd += ["--actor", actor, "--iterations", "0", "--offline-rho", "1.0"]
            cmd += ["--offline-steps", str(steps), "--offline-lr", str(lr)]
            cmd += ["--scripted-episodes", str(episodes)]
            cmd += ["--eval-episodes", str(a.eval_episodes), "--seed", str(a.seed)]
            cmd += ["--checkpoint-every", "0", "--torch-threads", str(a.threads), "--save-model"]
            cmd += ["--output-dir", os.path.join(out, "runs")]
            t0 = time.time()
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd[1:])}", flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT)
            run = os.path.join(out, "runs", os.listdir(os.path.join(out, "runs"))[0])
            s = json.load(open(os.path.join(run, "summary.json")))
            s = {
                k: s[k]
                for k in ("eval_return", "eval_return_se", "eval_success_rate")
                + ("eval_return_greedy", "eval_success_rate_greedy")
            }
            s.update(params=n_params, wall_s=time.time() - t0)
            json.dump(s, open(summary_path, "w"), indent=2)
        s = json.load(open(summary_path))
        rows.append(
            f"| {name} | {layers} x {width}, BPE {vocab} ({split}) | {s['params'] / 1e6:.1f}M | "
            f"{steps} | {lr:g} | {episodes} | {s['eval_success_rate']:.2f} | "
            f"{s['eval_return']:.2f} ± "
            f"{s['eval_return_se']:.2f} | {s['eval_success_rate_greedy']:.2f} | "
            f"{s['wall_s'] / 60:.0f} |"
        )
    md = (
        "| variant | model | parameters | BC steps | lr | episodes | success (sampled) |"
        " return ± s.e. | success (greedy) | minutes |\n|---|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    print(md)
    os.makedirs(os.path.join(ROOT, "benchmark", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "benchmark", "results", "gmc_bc.md"), "w") as f:
        f.write(md)


if __name__ == "__main__":
    main()
