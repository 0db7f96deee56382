"""Runs lose nothing and mix nothing: --resume continues a run exactly (every script), a resumed
run keeps its own arguments, run directories are never shared, and bad input fails before anything
is loaded or written, with one line naming the problem (exit status 2 on the command line)."""

import importlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import load_checkpoint, run_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "twenty_questions_subset"
COMMON = dict(
    env=ENV,
    max_turns=4,
    max_new_tokens=8,
    eval_episodes=4,
    eval_every=1,
    checkpoint_every=1,
    device="cpu",
    seed=2,
    scripted_episodes=30,
    batch_size=8,
    micro_batch_size=4,
)
SMALL = {
    "archer": dict(
        bc_steps=3,
        warmup_iters=1,
        rollouts_per_iter=4,
        critic_updates_per_iter=2,
        actor_updates_per_iter=2,
    ),
    "chai": dict(bc_steps=3, rollouts_per_iter=4, critic_updates_per_iter=2, k=2),
    "filtered_bc": dict(offline_steps=3, rollouts_per_iter=4, actor_updates_per_iter=2),
    "ppo_token": dict(bc_steps=3, rollouts_per_iter=4, ppo_epochs=2),
    "poad": dict(bc_steps=3, rollouts_per_iter=4, ppo_epochs=2),
    "archer_offline": dict(critic_updates_per_iter=2, actor_updates_per_iter=2),
    "qsft": dict(bc_steps=3, updates_per_iter=2),
    "ilql": dict(updates_per_iter=2),
}


def small(script, out, **kw):
    mod = importlib.import_module(script)
    return mod, mod.Args(output_dir=str(out), **{**COMMON, **SMALL[script], **kw})


def trained(summary):
    """What training produced, per iteration (evaluations and timings left out)."""
    keep = ("losses/", "values/", "charts/episodic_return", "charts/success_rate")
    return [
        {k: v for k, v in h.items() if k.startswith(keep)} | {"iteration": h["iteration"]}
        for h in summary["history"]
    ]


@pytest.mark.parametrize("script", list(SMALL))
def test_resume_equals_the_uninterrupted_run(script, tmp_path):
    """A run stopped after its iteration-2 checkpoint and resumed to 4 iterations ends exactly
    where a 4-iteration run does: the same per-iteration losses, the same final evaluation, the
    same weights (CPU)."""
    mod, args = small(script, tmp_path / "a", iterations=2)
    mod.main(args)
    d = run_dir(tmp_path / "a")
    mod.main(mod.Args(resume=str(d), iterations=4))  # the run's own arguments, extended
    mod, args = small(script, tmp_path / "b", iterations=4)
    mod.main(args)
    resumed = json.loads((d / "summary.json").read_text())
    straight = json.loads((run_dir(tmp_path / "b") / "summary.json").read_text())
    assert [h["iteration"] for h in resumed["history"]] == [1, 2, 3, 4]
    assert trained(resumed) == trained(straight)
    assert resumed["eval_returns"] == straight["eval_returns"]
    assert len(resumed["resumes"]) == 1 and "resumes" in straight
    a, b = load_checkpoint(d), load_checkpoint(run_dir(tmp_path / "b"))
    for x, y in zip(a["models"], b["models"]):
        assert all(torch.equal(v, y[k]) for k, v in x.items())


def test_kill_9_then_resume_with_the_run_directory_alone(tmp_path):
    """The command line: a run killed with SIGKILL after a checkpoint and continued with only
    `--resume RUN_DIR` (its arguments come from the run) ends as the uninterrupted run."""
    flags = [
        "--env", ENV, "--max-turns", "4", "--max-new-tokens", "8", "--eval-episodes", "4",
        "--checkpoint-every", "1", "--device", "cpu", "--seed", "2", "--scripted-episodes",
        "30", "--batch-size", "8", "--micro-batch-size", "4", "--offline-steps", "3",
        "--rollouts-per-iter", "4", "--actor-updates-per-iter", "2", "--iterations", "10",
        "--torch-threads", "1",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "filtered_bc.py"]
    run = subprocess.Popen(cmd + flags + ["--output-dir", str(tmp_path / "a")], cwd=ROOT, env=env)
    deadline = time.time() + 300
    while time.time() < deadline and run.poll() is None:
        try:  # the RunState of the newest checkpoint (the folder may be in the middle of a rename)
            (state,) = (tmp_path / "a").glob("*/checkpoint/custom_checkpoint_0.pkl")
            if torch.load(state, weights_only=False)["iteration"] >= 2:
                break
        except (ValueError, OSError, RuntimeError):
            pass
        time.sleep(0.1)
    assert run.poll() is None, "the run ended before it could be killed"
    run.send_signal(signal.SIGKILL)
    run.wait()
    d = run_dir(tmp_path / "a")
    assert not (d / "summary.json").exists()
    out = subprocess.run(cmd + ["--resume", str(d)], cwd=ROOT, env=env, capture_output=True)
    assert out.returncode == 0, out.stderr[-2000:]
    subprocess.run(
        cmd + flags + ["--output-dir", str(tmp_path / "b")], cwd=ROOT, env=env, check=True
    )
    resumed = json.loads((d / "summary.json").read_text())
    straight = json.loads((run_dir(tmp_path / "b") / "summary.json").read_text())
    assert trained(resumed) == trained(straight) and len(resumed["history"]) == 10
    assert resumed["eval_returns"] == straight["eval_returns"]
    assert json.loads((d / "args.json").read_text())["iterations"] == 10  # written once


def test_resume_refuses_a_flag_that_changes_the_run_and_keeps_operational_ones(tmp_path):
    mod, args = small("filtered_bc", tmp_path, iterations=1, eval_every=0)
    mod.main(args)
    d = str(run_dir(tmp_path))
    with pytest.raises(SystemExit, match="--env 'guess_my_city': the resumed run has"):
        mod.main(mod.Args(resume=d, env="guess_my_city"))
    with pytest.raises(SystemExit, match="--rho 0.5"):
        mod.main(mod.Args(resume=d, rho=0.5, iterations=2))
    restored = mod.Args(resume=d, iterations=2)
    mod.restore_args(restored)
    assert restored.iterations == 2 and restored.rollouts_per_iter == 4 and restored.seed == 2


def test_concurrent_runs_never_share_a_directory(tmp_path, monkeypatch):
    from accelerate import Accelerator

    import filtered_bc as fbc

    monkeypatch.setattr(fbc.time, "time", lambda: 1_700_000_000.0)  # the same second
    dirs = []
    for _ in range(3):
        args = fbc.Args(output_dir=str(tmp_path), device="cpu")
        d, writer = fbc.start_run(args, Accelerator(cpu=True))
        writer.close()
        dirs.append(d)
    assert len(set(dirs)) == 3 and all(os.path.exists(os.path.join(d, "args.json")) for d in dirs)
    assert sorted(os.listdir(tmp_path))[1].endswith("-1")


BAD = [
    (dict(iterations=-1), "--iterations: must be at least 0"),
    (dict(batch_size=0), "--batch-size: must be at least 1"),
    (dict(rollouts_per_iter=0), "--rollouts-per-iter: must be at least 1"),
    (dict(dtype="half"), "--dtype: 'half'"),
    (dict(env="nope"), "--env: 'nope' is not a known env"),
    (dict(actor="/no/such/model"), "--actor: /no/such/model: no saved model there"),
    (dict(lr=0.0), "--lr: a learning rate must be > 0"),
    (dict(rho=1.5), "--rho: must lie in [0, 1]"),
    (dict(offline_steps=3, scripted_episodes=0), "--offline-steps > 0 needs --dataset"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_bad_input_fails_before_anything_is_written(change, message, tmp_path):
    mod, args = small("filtered_bc", tmp_path / "runs", **change)
    with pytest.raises(SystemExit) as e:
        mod.main(args)
    assert message in str(e.value.code) and "\n" not in str(e.value.code)
    assert not (tmp_path / "runs").exists()


def test_bad_datasets_and_model_folders_name_the_file(tmp_path):
    import filtered_bc as fbc

    binary = tmp_path / "data.jsonl"
    binary.write_bytes(bytes(range(256)))
    empty_folder = tmp_path / "model"
    empty_folder.mkdir()
    for change, message in [
        (dict(dataset=str(binary)), f"{binary}: not UTF-8 text"),
        (dict(dataset=str(tmp_path)), f"{tmp_path}: a directory"),
        (dict(actor=str(empty_folder)), f"{empty_folder}: no saved model there"),
    ]:
        with pytest.raises(SystemExit, match="^--") as e:
            fbc.main(fbc.Args(output_dir=str(tmp_path / "runs"), **change))
        assert message in str(e.value.code)
    assert not (tmp_path / "runs").exists()


def test_a_corrupted_checkpoint_is_one_line_and_writes_nothing(tmp_path):
    mod, args = small("filtered_bc", tmp_path, iterations=1, eval_every=0)
    mod.main(args)
    d = run_dir(tmp_path)
    before = sorted(os.listdir(d))
    model = d / "checkpoint" / "pytorch_model.bin"
    model.write_bytes(model.read_bytes()[:1000])  # truncated
    with pytest.raises(SystemExit, match="pytorch_model.bin is corrupted"):
        mod.main(mod.Args(resume=str(d)))
    (d / "checkpoint" / "tokenizer" / "tokenizer_config.json").unlink()
    model.write_bytes(b"")
    with pytest.raises(SystemExit, match="corrupted|incomplete"):
        mod.main(mod.Args(resume=str(d)))
    assert sorted(os.listdir(d)) == before


def test_command_line_bad_input_is_one_line_on_stderr_with_exit_status_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "archer.py", "--iterations", "-1", "--output-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == "--iterations: must be at least 0, got -1"
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("script", ["archer", "chai", "filtered_bc", "qsft", "ppo_token", "poad"])
def test_a_warm_start_stopped_midway_resumes_where_it_stopped(script, tmp_path, monkeypatch):
    """The BC / SFT warm start checkpoints every BC_CHECKPOINT_STEPS steps: stopped at step 4 of 5
    (checkpoint at 2), the resumed run redoes steps 3-5 only and ends as the uninterrupted run."""
    mod = importlib.import_module(script)
    monkeypatch.setattr(mod, "BC_CHECKPOINT_STEPS", 2)
    steps = dict(offline_steps=5) if script == "filtered_bc" else dict(bc_steps=5)
    real, calls = mod.bc_step, []

    def stopped_at_the_fourth_step(*a):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(mod, "bc_step", stopped_at_the_fourth_step)
    with pytest.raises(KeyboardInterrupt):
        mod.main(small(script, tmp_path / "a", iterations=1, **steps)[1])
    monkeypatch.setattr(mod, "bc_step", real)
    d = run_dir(tmp_path / "a")
    state = load_checkpoint(d)["custom"][-1]
    assert state["offline_step" if script == "filtered_bc" else "bc_step"] == 2
    mod.main(mod.Args(resume=str(d)))
    mod.main(small(script, tmp_path / "b", iterations=1, **steps)[1])
    resumed = json.loads((d / "summary.json").read_text())
    straight = json.loads((run_dir(tmp_path / "b") / "summary.json").read_text())
    assert trained(resumed) == trained(straight)
    assert resumed["eval_returns"] == straight["eval_returns"]


@pytest.mark.parametrize("script", list(SMALL))
def test_no_long_phase_is_silent(script, tmp_path, monkeypatch, capsys):
    """progress() prints a line when PROGRESS_S seconds have passed since its last one; rollouts,
    evaluations and every update loop call it at each step. With PROGRESS_S = 0 every call prints:
    each phase of an iteration shows up."""
    mod, args = small(script, tmp_path, iterations=1, checkpoint_every=0)
    monkeypatch.setattr(mod, "PROGRESS_S", 0)
    mod.main(args)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  ... ")]
    assert any(" episodes finished, turn " in x for x in lines)  # rollouts and evaluations
    assert any(x.startswith("  ... iter 1: ") for x in lines)  # the update loop
    monkeypatch.setattr(mod, "PROGRESS_S", 10**6)
    mod.progress("silent")
    assert "silent" not in capsys.readouterr().out
