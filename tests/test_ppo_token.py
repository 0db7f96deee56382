"""ppo_token.py: the token-level MDP (rewards on utterance ends, env text skipped) and GAE against
brute force, the clipped policy / value losses, entropy, KL penalty and whitening against hand
values, the separate value model, smoke runs (tiny, --save-model + reload, --resume, LoRA reference,
two processes) and a learning test."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import ppo_token as ppo
from helpers import (
    parse,
    assert_margin,
    launch_two_processes,
    load_checkpoint,
    paired_difference,
    run_dir,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "twenty_questions_subset"


# ------------------------------------------------------------------------------------------- losses


def brute_force_gae(rewards, values, gamma, lam):
    """Â_k = Σ_{l ≥ 0} (γλ)^l δ_{k+l} with δ_k = r_k + γ V_{k+1} − V_k and V = 0 after the episode's
    last token."""
    K = len(rewards)
    v = list(values) + [0.0]
    delta = [rewards[k] + gamma * v[k + 1] - v[k] for k in range(K)]
    return [sum((gamma * lam) ** j * delta[k + j] for j in range(K - k)) for k in range(K)]


def test_gae_against_brute_force_on_two_padded_episodes():
    gamma, lam = 0.9, 0.8
    r1, v1 = [0.0, -1.0, 0.0, 0.5, -1.0], [0.3, -0.2, 1.0, 0.4, -0.7]  # 5 action tokens
    r2, v2 = (
        [0.0, 0.0, -1.0],
        [-1.0, 0.5, 2.0],
    )  # 3 action tokens, then padding that must not be bootstrapped from
    rewards = torch.tensor([r1, r2 + [9.0, 9.0]])
    values = torch.tensor([v1, v2 + [7.0, 7.0]])
    mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2])
    adv, ret = ppo.gae(rewards, values, mask, gamma, lam)
    want1, want2 = brute_force_gae(r1, v1, gamma, lam), brute_force_gae(r2, v2, gamma, lam)
    assert torch.allclose(adv, torch.tensor([want1, want2 + [0.0, 0.0]]), atol=1e-6)
    assert torch.allclose(
        ret,
        torch.tensor(
            [[a + v for a, v in zip(want1, v1)], [a + v for a, v in zip(want2, v2)] + [0, 0]]
        ),
        atol=1e-6,
    )
    # λ = 1, V = 0: Â is the discounted reward-to-go; λ = 0: Â is the one-step TD error
    adv, _ = ppo.gae(torch.tensor([[1.0, 2.0, 3.0]]), torch.zeros(1, 3), torch.ones(1, 3), 0.5, 1.0)
    assert adv.tolist() == [[1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0]]
    adv, _ = ppo.gae(
        torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 1.0]]), torch.ones(1, 2), 0.5, 0.0
    )
    assert adv.tolist() == [[1 + 0.5 * 1.0 - 0.5, 2 - 1.0]]


def test_utterance_end_rewards():
    # utterances of 2 and 3 tokens: the env reward of each turn sits on its last token only
    assert ppo.utterance_end_rewards([2, 3], [-1.0, 0.5]).tolist() == [0.0, -1.0, 0.0, 0.0, 0.5]
    assert ppo.utterance_end_rewards([1], [-1.0]).tolist() == [-1.0]


class UniformLM(torch.nn.Module):
    """A 'causal LM' whose logits are all 0: every token has log-prob −log V (so the KL to an
    identical reference is 0)."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, self.vocab) + 0 * self.dummy)


class PositionValue(torch.nn.Module):
    """V = the position index: shows at which position each action token's value is read."""

    def forward(self, input_ids, attention_mask, position_ids):
        return position_ids.float()


def test_build_batch_gae_over_a_two_utterance_episode_skips_the_env_reply():
    from accelerate import Accelerator

    tok = ppo.train_tiny_tokenizer(
        ["Questions:\nIs it an animal? No.\nMy guess: is it a pen? No.\n"] * 50, vocab_size=257
    )  # no merges: one token per byte
    traj = {
        "steps": [
            {
                "observation": "Questions:\n",
                "action": "Is it an animal?",
                "reward": -1.0,
                "done": False,
            },
            {
                "observation": "Questions:\nIs it an animal? No.\n",
                "action": "My guess: is it a pen?",
                "reward": -1.0,
                "done": True,
            },
        ]
    }
    pairs = ppo.tokenize_pairs(
        tok, [s["observation"] for s in traj["steps"]], [s["action"] for s in traj["steps"]], 448
    )
    (o1, a1), (o2, a2) = pairs
    assert len(a1) != len(a2)  # two utterances of different lengths
    reply = tok(" No.\n", add_special_tokens=False)["input_ids"]
    assert len(o2) == len(o1) + len(a1) - 1 + len(
        reply
    )  # turn 2 sees utterance 1 (its "\\n" replaced by the reply)
    args = SimpleNamespace(
        micro_batch_size=8,
        max_obs_tokens=448,
        kl_coef=0.5,
        gamma=0.9,
        gae_lambda=0.8,
        whiten_advantages=False,
    )
    lm = UniformLM(len(tok))
    items, stats = ppo.build_batch(
        [traj], lm, lm, PositionValue(), tok, args, Accelerator(cpu=True)
    )
    assert [len(it["adv"]) for it in items] == [len(a1), len(a2)] and stats["kl_ref"] == 0.0
    # values along the episode's action tokens: turn 1 reads positions len(o1)−1 ... ; turn 2 reads
    # len(o2)−1 ... — the value after utterance 1's last token is the one before utterance 2's first
    # token, i.e. AFTER the env reply
    values = [float(len(o1) - 1 + i) for i in range(len(a1))] + [
        float(len(o2) - 1 + i) for i in range(len(a2))
    ]
    assert torch.cat([it["v_old"] for it in items]).tolist() == values
    # (utterance 1's "\n" is followed in turn 2's context by the reply " No.\n", so the jump is
    # len(reply) positions, not 1)
    assert values[len(a1)] - values[len(a1) - 1] == len(reply) > 1
    # rewards on utterance ends only (KL term 0: the reference equals the actor)
    rewards = [0.0] * (len(a1) - 1) + [-1.0] + [0.0] * (len(a2) - 1) + [-1.0]
    want = brute_force_gae(rewards, values, 0.9, 0.8)
    got = torch.cat([it["adv"] for it in items])
    assert torch.allclose(got, torch.tensor(want), atol=1e-5)
    assert torch.allclose(
        torch.cat([it["ret"] for it in items]), torch.tensor(want) + torch.tensor(values), atol=1e-5
    )
    assert torch.allclose(
        torch.cat([it["logp_old"] for it in items]),
        torch.full((len(values),), -float(torch.log(torch.tensor(float(len(tok)))))),
    )


def test_kl_penalized_rewards_by_hand():
    env_r = torch.tensor([0.0, -1.0, 0.0])
    logp_old, logp_ref = torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.5, -1.0, -0.5])
    # r − β (log π_old − log π_ref) with β = 0.1: [0 − 0.1·0.5, −1 − 0.1·(−1), 0 − 0] = [−0.05,
    # −0.9, 0]
    assert torch.allclose(
        ppo.kl_penalized_rewards(env_r, logp_old, logp_ref, 0.1), torch.tensor([-0.05, -0.9, 0.0])
    )


def test_clipped_policy_loss_by_hand():
    logp_old = torch.zeros(4)
    ratios = torch.tensor([1.5, 0.5, 1.1, 0.7])
    logp = torch.log(ratios).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    # ε = 0.2.  token 0: min(1.5·1, 1.2·1) = 1.2 (clipped);
    # token 1: min(0.5, 0.8) = 0.5 (not clipped: it only helps)
    # token 2: min(1.1·(−2), 1.1·(−2)) = −2.2;  token 3: min(0.7·(−1), 0.8·(−1)) = −0.8 (clipped)
    # loss = −mean([1.2, 0.5, −2.2, −0.8]) = 0.325;
    # clip fraction (|ρ − 1| > ε): tokens 0, 1, 3 → 0.75
    loss, clipfrac = ppo.clipped_policy_loss(logp, logp_old, adv, 0.2)
    assert loss.item() == pytest.approx(0.325) and clipfrac.item() == pytest.approx(0.75)
    loss.backward()
    # d/d log π = −ρ Â / N where the unclipped term is the min, 0 where the clipped (constant)
    # one is
    assert torch.allclose(logp.grad, torch.tensor([0.0, -0.5 / 4, 2 * 1.1 / 4, 0.0]))


def test_clipped_value_loss_by_hand():
    v = torch.tensor([1.0, -3.0, 0.0], requires_grad=True)
    v_old = torch.tensor([0.0, -2.0, 0.5])
    ret = torch.tensor([2.0, -2.5, 0.0])
    # c = 0.5: clipped V = v_old + clip(v − v_old, ±0.5) = [0.5, −2.5, 0.0]
    # (V − R)² = [1, 0.25, 0];  (V_clip − R)² = [2.25, 0, 0];  max = [2.25, 0.25, 0];
    # ½ mean = 0.41666...
    loss = ppo.clipped_value_loss(v, v_old, ret, 0.5)
    assert loss.item() == pytest.approx(2.5 / 6)
    loss.backward()
    # token 0: the clipped term wins, its V is constant → no gradient;
    # token 1: (V − R)/N = −0.5/3;  token 2: 0
    assert torch.allclose(v.grad, torch.tensor([0.0, -0.5 / 3, 0.0]))
    assert ppo.clipped_value_loss(v, v_old, ret, 0.0).item() == pytest.approx(
        0.5 * (1 + 0.25 + 0) / 3
    )  # unclipped


def test_token_entropy_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30], [1 / 3, 1 / 3, 1 / 3]]))
    # H = −Σ p log p = 1.5 ln 2;  ≈ 0 for a one-hot;  ln 3 for uniform
    assert torch.allclose(
        ppo.token_entropy(logp), torch.tensor([1.5 * 0.6931472, 0.0, 1.0986123]), atol=1e-5
    )


def test_masked_whiten_by_hand():
    x = torch.tensor([[1.0, 3.0, 100.0], [5.0, -50.0, -50.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    # over the masked-in entries [1, 3, 5]: mean 3, variance (4 + 0 + 4)/3 = 8/3
    s = (8 / 3) ** 0.5
    assert torch.allclose(
        ppo.masked_whiten(x, mask), torch.tensor([[-2 / s, 0.0, 0.0], [2 / s, 0.0, 0.0]]), atol=1e-6
    )


# ------------------------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    actor, tok = ppo.load_actor("tiny", ppo.Args())
    return actor.eval(), tok


@pytest.mark.numerics
def test_value_model_is_a_separate_copy_of_the_actor_trunk(tiny):
    actor, tok = tiny
    value = ppo.value_model("actor", actor, tok)
    trunk = dict(actor.transformer.named_parameters())
    assert all(
        torch.equal(p, trunk[n]) for n, p in value.trunk.named_parameters()
    )  # same starting weights ...
    assert all(
        p.data_ptr() != trunk[n].data_ptr() for n, p in value.trunk.named_parameters()
    )  # ... not shared
    assert all(p.requires_grad for p in value.parameters())
    pairs = ppo.tokenize_pairs(
        tok,
        ["Questions:\n", "Questions:\nIs it alive? Yes.\n"],
        ["Is it a dog?", "Is it a pen?"],
        448,
    )
    batch = ppo.pad_pairs(pairs, tok.pad_token_id, "right")
    with torch.no_grad():
        v = ppo.token_values(value, *batch)
        logp, ent, index = ppo.action_token_logprobs_entropy(actor, *batch)
        logp2, index2 = ppo.action_token_logprobs(actor, *batch)
    assert (
        v.shape == logp.shape == ent.shape
        and torch.allclose(logp, logp2)
        and torch.equal(index, index2)
    )
    assert (ent > 0).all() and (ent <= torch.log(torch.tensor(float(len(tok)))) + 1e-4).all()
    assert isinstance(ppo.value_model("tiny", actor, tok).trunk.config.n_layer, int)


def test_reference_and_value_model_take_the_post_bc_actor_weights(tiny):
    """The reference and the value model are made from the initial actor before the BC warm start
    (so a checkpoint holds them from the first one on); start_from_actor then gives them the
    post-BC actor's weights: the reference all of them, the value model (--critic actor) its trunk,
    keeping its own head. A value model on another trunk (--critic tiny) is left alone."""
    import copy

    actor, tok = tiny
    actor = copy.deepcopy(actor)
    ref = copy.deepcopy(actor).requires_grad_(False)
    value, other = ppo.value_model("actor", actor, tok), ppo.value_model("tiny", actor, tok)
    head, fresh = copy.deepcopy(value.head.state_dict()), copy.deepcopy(other.state_dict())
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(0.01)  # "BC"
    ppo.start_from_actor(actor, ref, value, "actor")
    ppo.start_from_actor(actor, None, other, "tiny")
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in actor.state_dict().items())
    trunk = dict(actor.transformer.named_parameters())
    assert all(torch.equal(p, trunk[n]) for n, p in value.trunk.named_parameters())
    assert all(torch.equal(v, value.head.state_dict()[k]) for k, v in head.items())
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in fresh.items())


# --------------------------------------------------------------------------------------------- runs


def small_args(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path),
        scripted_episodes=40,
        bc_steps=3,
        bc_batch_size=8,
        iterations=2,
        rollouts_per_iter=4,
        ppo_epochs=2,
        batch_size=64,
        micro_batch_size=16,
        eval_episodes=4,
        eval_every=1,
        checkpoint_every=1,
        max_new_tokens=8,
        max_turns=6,
        device="cpu",
    )
    base.update(kw)
    return ppo.Args(**base)


def test_smoke_save_reload_and_resume(tmp_path):
    ppo.main(small_args(tmp_path, save_model=True))
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert (
        summary["episodes"] == 8
        and len(summary["history"]) == 2
        and -6 <= summary["eval_return"] <= 0
    )
    assert (
        "start_eval_return" in summary
        and "eval_return_greedy" in summary
        and summary["wall_time_s"] > 0
    )
    assert any(f.name.startswith("events.out.tfevents") for f in (d / "turnrl").iterdir())
    # models [actor, value], optimisers [actor, BC, value], registered objects [reference, RunState]
    ckpt = load_checkpoint(d)
    state = {"actor": ckpt["models"][0], "ref": ckpt["custom"][0], **ckpt["custom"][1]}
    assert len(ckpt["models"]) == 2 and len(ckpt["optimizers"]) == 3 and len(ckpt["custom"]) == 2
    # the saved actor reloads by path with the trained weights; the frozen reference kept the
    # starting (post-BC) ones
    actor, _ = ppo.load_actor(str(d / "actor"), ppo.Args())
    assert all(torch.equal(v, actor.state_dict()[k]) for k, v in state["actor"].items())
    assert any(not torch.equal(v, state["ref"][k]) for k, v in state["actor"].items())
    assert state["iteration"] == 2 and state["episodes"] == 8
    # resume to 4 iterations: continues at iteration 3; the reference is restored, not re-copied
    # from the actor
    ppo.main(parse(ppo, iterations=4, resume=str(d)))
    summary = json.loads((d / "summary.json").read_text())
    assert [h["iteration"] for h in summary["history"]] == [1, 2, 3, 4] and summary[
        "episodes"
    ] == 16
    ckpt = load_checkpoint(d)
    new_state = {"ref": ckpt["custom"][0], **ckpt["custom"][1]}
    assert new_state["iteration"] == 4 and all(
        torch.equal(v, new_state["ref"][k]) for k, v in state["ref"].items()
    )
    # the resumed actor is measured against the old reference: were the reference re-made from the
    # resumed actor, the sampled KL estimate would be exactly 0 (it is a sample estimate, so its
    # sign is not fixed)
    assert abs(summary["history"][2]["values/kl_ref"]) > 1e-6


def test_lora_on_a_fresh_adapter_uses_the_adapter_disabled_reference(tmp_path):
    pytest.importorskip("peft")
    ppo.main(small_args(tmp_path, lora_r=4, bc_steps=0, iterations=1, save_model=True))
    d = run_dir(tmp_path)
    # no copy: the starting policy is the actor with its adapter switched off, so the only
    # registered object is the RunState
    assert len(load_checkpoint(d)["custom"]) == 1
    history = json.loads((d / "summary.json").read_text())["history"]
    assert history[0]["values/kl_ref"] == pytest.approx(0.0, abs=1e-4)
    assert (d / "actor" / "config.json").exists()  # saved with the adapter merged


def test_resume_without_checkpoint_fails_clearly(tmp_path):
    with pytest.raises(SystemExit, match="not a run directory"):
        parse(ppo, resume=str(tmp_path / "nothing"))


def test_help_documents_every_flag():
    out = subprocess.run(
        [sys.executable, "ppo_token.py", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0
    for flag in [
        "--critic",
        "--ppo-epochs",
        "--gamma",
        "--gae-lambda",
        "--clip-coef",
        "--value-clip",
        "--ent-coef",
        "--kl-coef",
        "--whiten-advantages",
        "--rollouts-per-iter",
        "--bc-steps",
        "--resume",
        "--save-model",
    ]:
        assert flag in out.stdout
    assert "2048" in out.stdout and "6e-6" in out.stdout  # the paper-scale settings are documented


SMALL_CLI = [
    "--scripted-episodes",
    "20",
    "--bc-steps",
    "2",
    "--bc-batch-size",
    "8",
    "--iterations",
    "2",
    "--rollouts-per-iter",
    "4",
    "--ppo-epochs",
    "1",
    "--batch-size",
    "32",
    "--micro-batch-size",
    "8",
    "--eval-episodes",
    "2",
    "--eval-every",
    "2",
    "--checkpoint-every",
    "1",
    "--max-new-tokens",
    "8",
    "--max-turns",
    "5",
    "--device",
    "cpu",
]


@pytest.mark.slow
def test_two_processes_with_accelerate(tmp_path):
    out = launch_two_processes(
        "ppo_token.py",
        [
            "--output-dir",
            str(tmp_path),
        ]
        + SMALL_CLI,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert (
        summary["world_size"] == 2 and summary["episodes"] == 8
    )  # 4 rollouts per iteration in total
    assert len(load_checkpoint(d)["rng"]) == 2
    assert out.stdout.count("iter 2/2") == 1  # only the main process prints


def test_learning_return_rises_and_the_policy_moves_towards_higher_return(tmp_path, bc_actor):
    """From the shared BC actor (conftest.py), PPO's defaults for 5 iterations of 64 rollouts (320
    episodes), seed 1: the evaluated return rises beyond 2 s.e. of the paired difference on 1,200
    fixed episodes (common random numbers). Then the mechanism, on a fresh batch of the BC actor's
    episodes, each beyond 2 s.e.: (1) the utterances of above-average-return episodes get the
    larger GAE advantages (Welch s.e.); (2) one PPO update (build_batch + ppo_epochs of ppo_step)
    changes each utterance's per-token log-probability in proportion to its mean advantage: their
    covariance over the batch is positive (s.e. of the mean of the products).

    Measured 2026-12-02 on an AMD EPYC (one torch thread): 5 iterations −11.11 → −9.40, +1.71 ± 0.23
    (7.3 s.e.; its first 600 episodes +1.42 ± 0.33, 4.3 s.e.); 4 iterations on 600 episodes (the
    test until then) +1.10 ± 0.32 (3.4 s.e.: thin for other CPUs, docs/usage.md "Tests"). Earlier
    measured (2026-11-27, seed 1, one torch thread, the one-thread BC actor, beside another run): 4
    iterations -10.99 -> -9.86, +1.13 +- 0.32 (3.5 s.e.), 137 s for the run; 3 iterations +0.82 +-
    0.31 (2.7 s.e.), 118 s; 5 iterations (the test until 2026-11-27) -10.99 -> -9.45, +1.54 +- 0.32
    (4.8 s.e.), 173 s in CI with the checks below; advantage gap 0.89 +- 0.08 (10.8 s.e.),
    covariance 0.0275 +- 0.0028 (10.0 s.e.). The earlier version of this test (its own 150-step BC
    start, 2 iterations of 32 rollouts) could only assert that the return did not fall (-17.60 ->
    -17.22, +0.38 +- 0.79); from the benchmark's BC start PPO gains +2.20 +- 0.29 over seeds 1-3 at
    320 episodes (docs/benchmark.md)."""
    import copy

    import numpy as np
    from accelerate import Accelerator

    actor_dir, _ = bc_actor
    args = ppo.Args(
        output_dir=str(tmp_path),
        actor=actor_dir,
        bc_steps=0,
        iterations=5,
        eval_episodes=1200,
        eval_every=0,
        checkpoint_every=0,
        device="cpu",
        seed=1,
    )
    ppo.main(args)
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["episodes"] == 320
    diff, se = paired_difference(summary["eval_returns"], summary["start_eval_returns"])
    assert_margin(diff, se, 2, (summary["start_eval_return"], summary["eval_return"], diff, se))

    actor, tok = ppo.load_actor(actor_dir, ppo.Args())
    torch.manual_seed(0)
    trajs, _ = ppo.run_episodes(actor.eval(), tok, args, range(4242, 4242 + 48))
    mean_return = sum(t["return"] for t in trajs) / len(trajs)
    above = torch.tensor([t["return"] > mean_return for t in trajs for _ in t["steps"]])
    ref, value = copy.deepcopy(actor), ppo.value_model("actor", actor, tok)
    items, _ = ppo.build_batch(trajs, actor, ref, value, tok, args, Accelerator(cpu=True))
    batch = ppo.pad_pairs([it["pair"] for it in items], tok.pad_token_id, "right")
    n_tok = torch.tensor([float(len(it["adv"])) for it in items])
    with torch.no_grad():
        before = ppo.action_logprobs(actor, *batch)
    actor_opt, value_opt = (
        torch.optim.AdamW(actor.parameters(), lr=args.lr),
        torch.optim.AdamW(value.parameters(), lr=args.value_lr),
    )
    rng = np.random.default_rng(0)
    for _ in range(args.ppo_epochs):
        for chunk in np.array_split(
            rng.permutation(len(items)), max(1, len(items) // args.batch_size)
        ):
            ppo.ppo_step(
                actor,
                value,
                actor_opt,
                value_opt,
                Accelerator(cpu=True),
                tok,
                [items[i] for i in chunk],
                args,
            )
    with torch.no_grad():
        delta = ppo.action_logprobs(actor, *batch) - before
    mean_adv = torch.tensor([float(torch.as_tensor(it["adv"]).float().mean()) for it in items])
    hi, lo = mean_adv[above], mean_adv[~above]
    gap, gap_se = hi.mean() - lo.mean(), (hi.var() / len(hi) + lo.var() / len(lo)) ** 0.5  # Welch
    assert_margin(gap, gap_se, 2, (float(hi.mean()), float(lo.mean()), float(gap_se)))
    gain = delta / n_tok  # change of log π per action token, per utterance
    prod = (mean_adv - mean_adv.mean()) * (gain - gain.mean())
    cov, cov_se = (
        prod.mean(),
        prod.std() / len(prod) ** 0.5,
    )  # sample covariance and its standard error
    print(
        f"advantage gap {float(gap):.3f} ± {float(gap_se):.3f}; "
        f"covariance {float(cov):.4f} ± {float(cov_se):.4f}"
    )
    assert_margin(cov, cov_se, 2, (float(cov), float(cov_se)))


def test_preset_paper_sets_the_ppo_rows_of_table_2():
    """--preset paper (parse_args): Table 2's PPO rows (20Q: lr 6e-6, 2,048 rollouts, 10 epochs —
    20 on the full game; Guess My City: lr 6e-4, 1,024 rollouts, 4 epochs; batch 1,024, γ 0.95, λ
    0.95, clip 0.2) and the SFT rows for the BC warm start (lr 2e-4, batch 32), except the flags
    given; the paper gives no PPO values for the other envs, so --preset paper refuses them."""
    argv = ["--preset", "paper", "--env", "guess_my_city", "--ppo-epochs", "2"]
    args = ppo.parse_args(argv)
    assert (args.lr, args.rollouts_per_iter, args.ppo_epochs, args.batch_size) == (
        6e-4,
        1024,
        2,
        1024,
    )
    assert (args.bc_lr, args.bc_batch_size, args.critic) == (2e-4, 32, "actor")
    for name, value in ppo.PAPER["guess_my_city"].items():
        assert getattr(args, name) == (2 if name == "ppo_epochs" else value), name
    full = parse(ppo, preset="paper", env="twenty_questions")
    assert (full.lr, full.rollouts_per_iter, full.ppo_epochs) == (6e-6, 2048, 20)
    with pytest.raises(SystemExit, match="no paper values for --env webshop"):
        parse(ppo, preset="paper", env="webshop")
