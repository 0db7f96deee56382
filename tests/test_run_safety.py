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
from helpers import parse, load_checkpoint, run_dir

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
    "gigpo": dict(bc_steps=3, groups_per_iter=2, group_size=2, ppo_epochs=2),
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
    mod.main(parse(mod, resume=str(d), iterations=4))  # its arguments, extended
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
        parse(mod, resume=d, env="guess_my_city")
    with pytest.raises(SystemExit, match="--rho 0.5"):
        parse(mod, resume=d, rho=0.5, iterations=2)
    restored = parse(mod, resume=d, iterations=2)
    assert restored.iterations == 2 and restored.rollouts_per_iter == 4 and restored.seed == 2
    # from the command line: a flag named with its default value counts as given
    with pytest.raises(SystemExit, match="--seed 1: the resumed run has 2"):
        mod.parse_args(["--resume", d, "--seed", "1"])


def test_concurrent_runs_never_share_a_directory(tmp_path, monkeypatch):
    from accelerate import Accelerator

    import filtered_bc as fbc

    monkeypatch.setattr(fbc.time, "time", lambda: 1_700_000_000.0)  # the same second
    dirs = []
    for _ in range(3):
        args = fbc.Args(output_dir=str(tmp_path), device="cpu")
        run = fbc.start_run(args, Accelerator(cpu=True), fbc.RunState(args), None)
        run.acc.end_training()
        dirs.append(run.dir)
    assert len(set(dirs)) == 3 and all(os.path.exists(os.path.join(d, "args.json")) for d in dirs)
    assert sorted(os.listdir(tmp_path))[1].endswith("-1")


BAD = [
    (dict(iterations=-1), "--iterations: must be at least 0"),
    (dict(batch_size=0), "--batch-size: must be at least 1"),
    (dict(rollouts_per_iter=0), "--rollouts-per-iter: must be at least 1"),
    (dict(env="nope"), "--env: 'nope' is not a known env"),
    (dict(actor="/no/such/model"), "--actor /no/such/model: cannot load it"),
    (dict(lr=0.0), "--lr: must lie in (0, inf), got 0.0"),
    (dict(rho=1.5), "--rho: must lie in (0, 1], got 1.5"),
    (dict(offline_steps=3, scripted_episodes=0), "--dataset FILE or --scripted-episodes N > 0"),
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
        (dict(actor=str(empty_folder)), f"--actor {empty_folder}: cannot load it"),
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
    with pytest.raises(SystemExit, match="the checkpoint cannot be loaded"):
        mod.main(parse(mod, resume=str(d)))
    (d / "checkpoint" / "tokenizer" / "tokenizer_config.json").unlink()
    model.write_bytes(b"")
    with pytest.raises(SystemExit, match="cannot load it|cannot be loaded"):
        mod.main(parse(mod, resume=str(d)))
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


@pytest.mark.parametrize(
    "script", ["archer", "chai", "filtered_bc", "qsft", "ppo_token", "poad", "gigpo"]
)
def test_a_run_stopped_in_its_warm_start_starts_again(script, tmp_path, monkeypatch):
    """The BC / SFT warm start writes no checkpoint (a few minutes, redone): stopped at its fourth
    step, the run folder holds none, and --resume RUN_DIR starts the run again there, ending as
    the uninterrupted run."""
    mod = importlib.import_module(script)
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
    assert not (d / "checkpoint").exists()
    mod.main(parse(mod, resume=str(d)))
    mod.main(small(script, tmp_path / "b", iterations=1, **steps)[1])
    resumed = json.loads((d / "summary.json").read_text())
    straight = json.loads((run_dir(tmp_path / "b") / "summary.json").read_text())
    assert trained(resumed) == trained(straight) and resumed["resumes"] == []
    assert resumed["eval_returns"] == straight["eval_returns"]


def test_tyro_refuses_a_bad_choice_or_type_with_exit_status_2(capsys):
    """Choices (Literal fields) and types are tyro's to check: its message names the flag."""
    import archer

    for argv in (["--dtype", "half"], ["--iterations", "two"], ["--critic-input", "both"]):
        with pytest.raises(SystemExit) as e:
            archer.parse_args(argv)
        assert e.value.code == 2 and argv[0] in capsys.readouterr().err


@pytest.mark.parametrize("script", list(SMALL))
def test_no_long_phase_is_silent(script, tmp_path, monkeypatch, capsys):
    """progress() prints a line when PROGRESS_S seconds have passed since its last one; rollouts,
    evaluations and every update loop call it at each step. With PROGRESS_S = 0 every call prints:
    each phase of an iteration shows up."""
    mod, args = small(script, tmp_path, iterations=1, checkpoint_every=0)
    monkeypatch.setattr(mod, "PROGRESS_S", 0)
    mod.main(args)
    out = capsys.readouterr().out.splitlines()
    lines = [x for x in out if x.startswith("  ... ")]
    assert any(" episodes finished, turn " in x for x in lines)  # rollouts and evaluations
    assert any(x.startswith("  ... iter 1: ") for x in lines)  # the update loop
    # the device, dtype, processes and torch threads once at the start; the last line: start → end,
    # paired difference
    first = [x for x in out if x.startswith("device cpu, dtype float32, 1 process(es), ")]
    threads = f"{torch.get_num_threads()} torch thread(s) each (--torch-threads); run "
    assert len(first) == 1 and threads in first[0], first
    assert out[-1].startswith("result: eval return ") and "(paired difference " in out[-1]
    monkeypatch.setattr(mod, "PROGRESS_S", 10**6)
    mod.progress("silent")
    assert "silent" not in capsys.readouterr().out


# --- issue 39: inputs that used to slip through; each fails before anything is written ----------
CLI_BAD = [  # (script, flags, what the one line on stderr says)
    ("qsft", ["--device", "cuda"], "--device cuda: Torch not compiled with CUDA enabled"),
    ("archer", ["--device", "gpu"], "--device gpu: Expected one of cpu, cuda"),
    ("filtered_bc", ["--rho", "0"], "--rho: must lie in (0, 1], got 0.0"),
    ("chai", ["--output-dir", "{file}/runs"], "--output-dir {file}/runs: cannot create a run"),
    (
        "archer_offline",
        ["--resume", "{tmp}"],
        "--resume {tmp}: not a run directory (no {tmp}/args.json)",
    ),
    ("poad", ["--env", "datasci_coding"], "apt-get install bubblewrap"),
    ("ppo_token", ["--env", "chess_endgame"], "pip install chess"),
]


@pytest.mark.parametrize("script,flags,message", CLI_BAD, ids=[c[0] for c in CLI_BAD])
def test_command_line_refuses_with_one_line_and_writes_nothing(script, flags, message, tmp_path):
    """Exit status 2, one line on stderr naming the flag and the fix, no traceback, nothing
    written. bwrap is hidden (PATH holds only the interpreter's folder) and python-chess made
    unimportable, as on a machine without them."""
    file = tmp_path / "a-file"
    file.write_text("")
    fill = lambda s: s.format(file=file, tmp=tmp_path)  # noqa: E731
    argv = [f"{script}.py", *map(fill, flags), "--torch-threads", "1"]
    if "--output-dir" not in flags:
        argv += ["--output-dir", str(tmp_path / "runs")]
    run = f"import runpy, sys; sys.modules['chess'] = None; sys.argv = {argv!r}; "
    run += f"runpy.run_path({argv[0]!r}, run_name='__main__')"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    env["PATH"] = os.path.dirname(sys.executable)
    env.pop("TURNRL_ALLOW_UNSANDBOXED", None)
    out = subprocess.run(
        [sys.executable, "-c", run], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert fill(message) in line and line.startswith("--"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and not out.stdout


@pytest.mark.parametrize(
    "script,change,message",
    [
        ("filtered_bc", dict(offline_rho=0.0), "--offline-rho: must lie in (0, 1]"),
        ("filtered_bc", dict(top_p=0.0), "--top-p: must lie in (0, 1]"),
        ("filtered_bc", dict(max_grad_norm=0.0), "--max-grad-norm: must lie in (0, inf)"),
        ("archer", dict(tau=0.0), "--tau: must lie in (0, 1]"),
        ("archer", dict(gamma=1.5), "--gamma: must lie in [0, 1]"),
        ("chai", dict(tau=1.5), "--tau: must lie in (0, 1]"),
        ("archer_offline", dict(expectile=0.3), "--expectile: must lie in [0.5, 1)"),
        ("archer_offline", dict(expectile=1.0), "--expectile: must lie in [0.5, 1)"),
        ("ppo_token", dict(clip_coef=0.0), "--clip-coef: must lie in (0, 1)"),
        ("poad", dict(gae_lambda=-0.1), "--gae-lambda: must lie in [0, 1]"),
        ("poad", dict(temperature=-1.0), "--temperature: must lie in [0, inf), got -1.0"),
        ("qsft", dict(tau=0.0), "--tau: must lie in (0, 1]"),
        ("qsft", dict(beta=float("nan")), "--beta: must lie in [0, inf), got nan"),
        ("ilql", dict(expectile=0.3), "--expectile: must lie in [0.5, 1)"),
        ("ilql", dict(tau=0.0), "--tau: must lie in (0, 1]"),
    ],
)
def test_fractions_and_coefficients_are_checked_in_their_ranges(script, change, message, tmp_path):
    mod = importlib.import_module(script)
    with pytest.raises(SystemExit) as e:
        mod.check_args(mod.Args(output_dir=str(tmp_path / "runs"), device="cpu", **change))
    assert message in str(e.value.code) and "\n" not in str(e.value.code)
    assert not (tmp_path / "runs").exists()


def test_device_choices_and_gpu_index(tmp_path, monkeypatch):
    """A --device torch cannot place a tensor on is refused (accelerate would fall back to the CPU
    without a word); cuda:N of a single-process run becomes the current device (accelerate's),
    and under accelerate launch cuda:N is refused (each process takes its own GPU)."""
    import filtered_bc as fbc

    args = lambda device: fbc.Args(output_dir=str(tmp_path), device=device)  # noqa: E731
    for device in ("cuda:x", "CUDA", "cuda:", "tpu", "cuda", "cuda:0"):
        with pytest.raises(SystemExit, match=f"--device {device}: .*cuda:N or mps"):
            fbc.setup(args(device))
    chosen = []
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: None)  # as if the GPU were there
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(fbc, "Accelerator", lambda **kw: type("A", (), {"process_index": 0})())
    fbc.setup(args("cuda:1"))
    assert chosen == ["cuda:1"]
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit, match="CUDA_VISIBLE_DEVICES"):
        fbc.setup(args("cuda:1"))
    assert list(tmp_path.iterdir()) == []


def test_an_output_dir_that_cannot_be_made_leaves_nothing_behind(tmp_path):
    mod, _ = small("filtered_bc", tmp_path)
    (tmp_path / "file").write_text("")
    for out in ("file/a/b", "file"):
        with pytest.raises(SystemExit) as e:
            mod.main(small("filtered_bc", tmp_path / out, iterations=1)[1])
        assert str(e.value.code).startswith(f"--output-dir {tmp_path / out}: cannot create")
        assert "Not a directory" in str(e.value.code)  # the OS's own reason
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_resume_of_a_folder_that_is_not_a_run_says_what_is_missing(tmp_path):
    import filtered_bc as fbc

    (tmp_path / "checkpoint").mkdir()
    for folder in (tmp_path, tmp_path / "nope"):
        with pytest.raises(SystemExit, match=f"not a run directory \\(no {folder}/args.json\\)"):
            parse(fbc, resume=str(folder))


def test_a_hub_id_offline_is_one_attempt_and_names_hf_download(tmp_path, monkeypatch):
    """With the Hub unreachable (HF_HUB_OFFLINE unset), a model that is not cached is asked for
    once, without huggingface_hub's retries (~50 s of them), and the one line names the command
    huggingface-hub ships to download it."""
    import huggingface_hub
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    import archer

    calls = []

    def unreachable(*a, **kw):
        calls.append(a)
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", unreachable)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **kw: 1 / 0)
    with pytest.raises(SystemExit) as e:
        archer.pretrained(AutoTokenizer, "actor", "gpt2")
    assert len(calls) == 1 and "hf download gpt2" in str(e.value.code)
    assert "Name or service not known" in str(e.value.code) and "\n" not in str(e.value.code)


def test_unknown_flags_get_tyro_suggestions():
    out = subprocess.run(
        [sys.executable, "filtered_bc.py", "--rollout-per-iter", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "Perhaps you meant" in out.stderr
    assert "--rollouts-per-iter" in out.stderr


def test_progress_lines_tell_evaluation_from_training_and_the_last_line_is_the_result():
    import chai

    line = chai.metrics_line(
        {
            "charts/episodic_return": -8.44,
            "eval/episodic_return": -9.87,
            "eval/episodic_return_se": 0.52,
            "eval/success_rate": 0.5,
        }
    )
    assert line == "episodic_return -8.44  eval_return -9.87 ± 0.52  eval_success_rate 0.5"
    start = {"return": -10.0, "return_se": 1.0, "returns": [-10.0, -12.0, -8.0]}
    final = {"return": -8.0, "return_se": 1.0, "returns": [-9.0, -9.0, -6.0]}
    assert chai.result_line(start, final) == (
        "result: eval return -10.00 ± 1.00 → -8.00 ± 1.00 (paired difference +2.00 ± 0.58, "
        "3 episodes)"
    )
    assert chai.result_line(None, final).startswith("result: eval return -8.00 ± 1.00 (no start")
