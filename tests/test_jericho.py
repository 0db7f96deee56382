"""Interactive fiction through Jericho (envs/jericho_env.py), played on our own four-room Inform 6
game (envs/jericho_games/gullpoint.z5): milestones, parser errors, meta commands, the step limit,
independence, close, the missing-engine / missing-ROM messages, scripted policies, corpus, datasets
and one script end to end (fast). The tests that play need the optional extra
(pip install -r requirements-jericho.txt) and are skipped, with that reason, without it."""

import gc
import importlib.util
import json
import shutil
import subprocess
import weakref

import pytest

import envs
from envs import jericho_env as je

needs_jericho = pytest.mark.skipif(
    importlib.util.find_spec("jericho") is None,
    reason="jericho is not installed: pip install -r requirements-jericho.txt",
)
REWARDS = [0, 10, 0, 0, 0, 10, 0, 10, 20]  # per command of je.TEST_SOLUTION


@pytest.fixture(autouse=True)
def no_rom_variable(monkeypatch):
    monkeypatch.delenv(je.ROM_ENV, raising=False)


def play(env, commands):
    return [env.step(c) for c in commands]


@needs_jericho
def test_reset_shows_the_start_and_the_info():
    env = envs.make("jericho")
    obs, info = env.reset(seed=0)
    assert obs.startswith("The keeper is ill") and obs.endswith(
        "to the east a causeway leads to the lighthouse.\n"
    )
    assert ">" not in obs and "Score:" not in obs  # prompt and status line are cut
    assert info == {
        "target": "gullpoint",
        "won": False,
        "score": 0,
        "moves": 0,
        "max_score": 50,
        "turn": 0,
        "illegal": False,
        "valid_actions": None,
    }
    assert env.targets == ["gullpoint"] and env.max_steps == 50
    with pytest.raises(ValueError, match="unknown target"):
        env.reset(options={"target": "zork1"})


@needs_jericho
def test_the_solution_scores_every_milestone_and_wins():
    env = envs.make("jericho")
    env.reset()
    out = play(env, je.TEST_SOLUTION)
    assert [r for _, r, _, _, _ in out] == REWARDS
    assert [term for _, _, term, _, _ in out] == [False] * 8 + [True]
    obs, _, _, trunc, info = out[-1]
    assert not trunc and info["won"] and info["score"] == 50 and info["moves"] == 9
    assert "> take key\nTaken.\n" in obs and "*** You have won ***" in obs
    assert je.parse_commands(obs) == je.TEST_SOLUTION
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step("look")
    # reset starts the same game again
    obs2, info = env.reset()
    assert info["score"] == 0 and "> " not in obs2


@needs_jericho
def test_nonsense_and_meta_commands_cost_a_step_and_never_raise():
    env = envs.make("jericho")
    env.reset()
    obs, r, term, trunc, info = env.step("xyzzy frobnicate")
    assert (r, term, trunc) == (0.0, False, False) and info["illegal"] and info["turn"] == 1
    assert obs.endswith("> xyzzy frobnicate\nThat's not a verb I recognise.\n")
    for bad in [
        "",
        "   ",
        "\x00\x01\x7f",
        "ünïcödé ☃",
        "take " * 300,
        "north\nsouth",
        "take key. quit",
    ]:
        env.step(bad)
    assert env.turn == 8
    # the two-line utterance sent only "north"; "take key. quit" was refused, not half-run
    assert je.parse_commands(env.obs)[-2:] == ["north", "take key. quit"]
    assert je.META_REPLY in env.obs and env.score == 0
    # frotz reads backslashes as interpreter escapes (\\X quits; "\\me ..." looped forever)
    for bad in ["\\me be night is", "\\X", "\\help", "look \\N"]:
        _, _, term, _, _ = env.step(bad)
        assert not term
    assert je.parse_commands(env.obs)[-4:] == ["me be night is", "X", "help", "look N"]
    for meta in ["save", "RESTORE", "restart", "undo", "q", "quit", "script on"]:
        _, r, term, _, info = env.step(meta)
        assert r == 0 and not term and info["illegal"]
    _, r, _, _, info = env.step("take key")  # the game is still running, in the cottage
    assert r == 10 and not info["illegal"]
    with pytest.raises(TypeError):
        env.step(None)


@needs_jericho
def test_the_step_limit_counts_illegal_commands_and_ends_the_episode():
    for env in (envs.make("jericho", max_steps=3), envs.make("jericho", max_turns=3)):
        env.reset()
        out = play(env, ["north", "blah blah", ""])
        assert [(t, tr) for _, _, t, tr, _ in out] == [(False, False)] * 2 + [(False, True)]
        with pytest.raises(RuntimeError, match="finished episode"):
            env.step("south")
    with pytest.raises(ValueError, match="disagree"):
        envs.make("jericho", max_steps=3, max_turns=4)
    with pytest.raises(ValueError, match="unknown option"):
        envs.make("jericho", oracle="hf:gpt2")
    # the scripts pass max_turns=None and oracle="kb" for "the env's own"
    assert envs.make("jericho", max_turns=None, oracle="kb").max_steps == 50


@needs_jericho
def test_two_envs_are_independent():
    a, b = envs.make("jericho"), envs.make("jericho")
    a.reset(), b.reset()
    play(a, je.TEST_SOLUTION[:2])  # a has the key
    _, r, _, _, info = b.step("take key")  # b is still on the beach
    assert r == 0 and info["score"] == 0 and "can't see" in b.obs
    assert info["illegal"]  # a parser error: Inform counts no move for it
    assert a.score == 10 and a.moves == 2 and b.moves == 0
    out = play(a, je.TEST_SOLUTION[2:])
    assert out[-1][4]["won"] and not b.done


@needs_jericho
def test_close_releases_the_engine():
    env = envs.make("jericho")
    env.reset()
    engine = weakref.ref(env.game)
    env.close()
    gc.collect()
    assert engine() is None
    with pytest.raises(RuntimeError, match="close"):
        env.step("north")
    with pytest.raises(RuntimeError, match="close"):
        env.reset()
    env.close()  # twice is fine


def test_missing_rom_says_where_to_get_it(tmp_path):
    with pytest.raises(je.JerichoSetupError) as err:
        envs.make("detective")
    msg = str(err.value)
    assert je.DETECTIVE_URL in msg and "TURNRL_ROM" in msg and "rom_path" in msg
    with pytest.raises(je.JerichoSetupError, match="no game file at"):
        envs.make("jericho", rom_path=str(tmp_path / "missing.z5"))
    with pytest.raises(je.JerichoSetupError, match=je.DETECTIVE_URL):
        envs.scripted_policy("detective")


def test_missing_engine_and_rom_are_named_in_one_message(monkeypatch, tmp_path):
    monkeypatch.setattr(je, "_has_module", lambda name: False)
    with pytest.raises(je.JerichoSetupError) as err:
        envs.make("detective", rom_path=str(tmp_path / "detective.z5"))
    msg = str(err.value)
    assert "pip install -r requirements-jericho.txt" in msg and je.DETECTIVE_URL in msg
    with pytest.raises(je.JerichoSetupError, match="requirements-jericho.txt") as err:
        envs.make("jericho")  # the bundled test game is there; only the engine is missing
    assert "game file" not in str(err.value)


@needs_jericho
def test_rom_from_the_environment_variable_and_the_detective_checks(monkeypatch, tmp_path):
    rom = tmp_path / "copy.z5"
    shutil.copy(je.TEST_ROM, rom)
    monkeypatch.setenv(je.ROM_ENV, str(rom))
    env = envs.make("jericho")
    assert env.rom == rom and env.reset()[1]["target"] == "gullpoint"
    # the detective game must be the release Jericho supports (its score lives at fixed addresses)
    with pytest.raises(ValueError, match=je.DETECTIVE_MD5):
        envs.make("detective")
    with pytest.raises(ValueError, match="needs a game Jericho supports"):
        envs.make("jericho", valid_actions=True)


@needs_jericho
def test_a_game_jericho_does_not_know(monkeypatch, tmp_path):
    """Any other Z-machine game: score and moves from its status line, its file name as target,
    no scripted policy (no walkthrough), a corpus from generic commands."""
    data = bytearray(je.TEST_ROM.read_bytes())
    data[0x12:0x18] = b"990101"  # another serial number: a file neither Jericho nor we know
    rom = tmp_path / "lighthouse.z5"
    rom.write_bytes(bytes(data))
    monkeypatch.setenv(je.ROM_ENV, str(rom))
    env = envs.make("jericho")
    assert env.targets == ["lighthouse"] and env.max_score is None and not env.supported
    env.reset()
    out = play(env, je.TEST_SOLUTION)
    assert [r for _, r, _, _, _ in out] == REWARDS and out[-1][2] and out[-1][4]["won"]
    with pytest.raises(ValueError, match="no walkthrough"):
        envs.scripted_policy("jericho")
    texts = envs.corpus("jericho", 10)
    assert len(texts) == 10 and any("Shingle Beach" in t and "\n> " in t for t in texts)


@needs_jericho
def test_scripted_policies_follow_the_walkthrough_with_noise():
    env = envs.make("jericho")
    expert = envs.scripted_policy("jericho", mode="expert")
    obs, _ = env.reset()
    done, actions = False, []
    while not done:
        actions.append(expert(obs))
        obs, _, term, trunc, info = env.step(actions[-1])
        done = term or trunc
    assert actions == je.TEST_SOLUTION and info["won"]
    data = envs.collect_scripted("jericho", 30, seed=0)
    again = envs.collect_scripted("jericho", 30, seed=0)
    assert [t["steps"] for t in data] == [t["steps"] for t in again]  # deterministic per seed
    lengths = [len(t["steps"]) for t in data]
    assert min(lengths) >= 9 and max(lengths) > 9 and sum(t["success"] for t in data) >= 20
    illegal = [s for t in data for s in t["steps"] if s["action"] in je.INVALID_COMMANDS]
    assert illegal and all(t["env"] == "jericho" for t in data)
    with pytest.raises(ValueError, match="mode"):
        envs.scripted_policy("jericho", mode="optimal")


def test_policy_position_is_read_from_the_observation():
    policy = je.WalkthroughPolicy(["n", "take key", "s"], mode="expert")
    assert policy("Beach\n") == "n"
    assert policy("Beach\n> look\nBeach\n> N\nCottage\n") == "take key"
    assert policy("Beach\n> n\nx\n> take key\nTaken.\n> s\nBeach\n") == "look"  # past the end


@needs_jericho
def test_corpus_holds_whole_episodes_and_commands():
    texts = envs.corpus("jericho", 40, seed=0)
    assert len(texts) == 40 and all(isinstance(t, str) and t for t in texts)
    assert sum("Shingle Beach" in t and "\n> " in t for t in texts) >= 20
    assert "light lamp with matches" in texts


@pytest.mark.skipif(shutil.which("inform6") is None, reason="inform6 is not installed")
def test_the_checked_in_game_is_its_source_compiled(tmp_path):
    """The .z5 is gullpoint.inf compiled with the command in its header comment: equal bytes except
    the header's serial number (the compile date) and checksum."""
    src = je.TEST_ROM.with_suffix(".inf")
    out = tmp_path / "g.z5"
    done = subprocess.run(
        ["inform6", "-v5", "+include_path=/usr/share/inform6/library", str(src), str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    if "Inform 6.41" not in done.stdout:
        pytest.skip(f"the .z5 was built by Inform 6.41, this is {done.stdout.splitlines()[0]!r}")
    new, old = bytearray(out.read_bytes()), bytearray(je.TEST_ROM.read_bytes())
    for b in (new, old):
        b[0x12:0x18], b[0x1C:0x1E] = b"000000", b"00"
    assert new == old


@needs_jericho
def test_filtered_bc_runs_on_the_test_game(tmp_path):
    """One script end to end on the test game with tiny models: scripted data, BC, one online
    iteration, evaluation."""
    import filtered_bc as fbc
    from helpers import run_dir

    fbc.main(
        fbc.Args(
            output_dir=str(tmp_path),
            env="jericho",
            max_turns=10,
            scripted_episodes=10,
            offline_steps=3,
            iterations=1,
            rollouts_per_iter=2,
            actor_updates_per_iter=1,
            batch_size=8,
            micro_batch_size=8,
            eval_episodes=2,
            eval_every=0,
            checkpoint_every=0,
            max_new_tokens=6,
            device="cpu",
        )
    )
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["episodes"] == 2 and len(summary["eval_returns"]) == 2
    assert all(0 <= r <= 50 for r in summary["eval_returns"])
