"""envs/: registry, batched helper, scripted policies, datasets and their validation, corpus."""

import json
import os
import subprocess
import sys

import pytest

import envs
from envs.core import mentions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def play(env, policy, seed):
    obs, info = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, r, term, trunc, info = env.step(policy(obs))
        total += r
        done = term or trunc
    return total, info


def test_names_and_unknown_errors():
    assert {"guess_my_city", "twenty_questions", "twenty_questions_subset"} <= set(envs.names())
    assert envs.names() == sorted(envs.names())
    with pytest.raises(ValueError, match="valid names"):
        envs.make("spaceship")
    with pytest.raises(ValueError, match="valid options"):
        envs.make("twenty_questions", colour="red")
    with pytest.raises(ValueError, match="hf:<model id or path>"):
        envs.make("twenty_questions", oracle="gpt")
    env = envs.make("twenty_questions_subset")
    with pytest.raises(ValueError, match="valid targets"):
        env.reset(options={"target": "spaceship"})
    with pytest.raises(ValueError, match="valid: \\['target'\\]"):
        env.reset(options={"word": "dog"})


def test_subset_has_the_papers_ten_words():
    env = envs.make("twenty_questions_subset")
    assert sorted(env.targets) == sorted(
        [
            "football",
            "dog",
            "banana",
            "truck",
            "pants",
            "computer",
            "piano",
            "chair",
            "pen",
            "scissors",
        ]
    )
    assert len(envs.make("twenty_questions").targets) == 157
    assert len(envs.make("guess_my_city").targets) == 100


@pytest.mark.parametrize("name", ["twenty_questions", "twenty_questions_subset", "guess_my_city"])
def test_rules_info_target_and_reproducible_seeds(name):
    env = envs.make(name)
    obs, info = env.reset(seed=3)
    assert obs == "Questions:\n" and info["target"] in env.targets
    first = [env.reset(seed=s)[1]["target"] for s in range(20)]
    again = [env.reset(seed=s)[1]["target"] for s in range(20)]
    assert first == again and len(set(first)) > 1
    r1 = [play(env, envs.scripted_policy(name, seed=5), s) for s in range(5)]
    r2 = [play(env, envs.scripted_policy(name, seed=5), s) for s in range(5)]
    assert r1 == r2  # the same seeds give the same episodes
    env.reset(seed=0)
    for _ in range(20):
        env.step("What is it?")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("One more?")


@pytest.mark.parametrize("name", ["twenty_questions", "guess_my_city"])
def test_category_questions_are_useful_and_cover_every_target(name):
    module = envs.game_module(name)
    assert set(module.CATEGORY_QUESTIONS) <= set(module.USEFUL_QUESTIONS)
    for target in module.TARGETS:
        assert any(
            module.answer(target, q).lower().startswith("yes") for q in module.CATEGORY_QUESTIONS
        ), target


def test_turn_limit_is_terminal_and_returns_minus_twenty():
    env = envs.make("twenty_questions_subset")
    env.reset(options={"target": "dog"})
    total = 0.0
    for t in range(20):
        obs, r, term, trunc, info = env.step("Is it made of glass?")
        total += r
        assert term == (t == 19) and not trunc
    assert total == -20 and not info["won"] and obs.count("\n") == 21


def test_vec_env_matches_single_envs():
    name, n = "twenty_questions", 6
    vec = envs.make_vec(name, n)
    obs, infos = vec.reset(seed=100)
    singles = [envs.make(name) for _ in range(n)]
    for i, env in enumerate(singles):
        o, info = env.reset(seed=100 + i)
        assert o == obs[i] and info["target"] == infos[i]["target"]
    policies = [envs.scripted_policy(name, seed=i) for i in range(n)]
    policies2 = [envs.scripted_policy(name, seed=i) for i in range(n)]
    done_single = [False] * n
    while any(vec.active):
        actions = [policies[i](obs[i]) if vec.active[i] else "" for i in range(n)]
        obs, rewards, dones, infos = vec.step(actions)
        for i, env in enumerate(singles):
            if done_single[i]:
                assert rewards[i] == 0.0 and dones[i]
                continue
            assert actions[i] == policies2[i](env.obs)
            o, r, term, trunc, info = env.step(actions[i])
            assert (o, r, term or trunc, info["won"]) == (
                obs[i],
                rewards[i],
                dones[i],
                infos[i]["won"],
            )
            done_single[i] = term or trunc
    with pytest.raises(ValueError, match="6 envs"):
        vec.step(["x"])


def test_run_episodes_records_the_anchor_each_action_was_taken_in():
    """envs.run_episodes keeps an env's info["anchor"] (its state without the history) as the step's
    "anchor": the state the action was taken in (reset's info for the first step, then the previous
    step's), as a replay of the same actions shows; an env without one (the question games, where
    the dialogue is the state) gets steps without the key, as before."""
    actions = ["search[conditioner natural]", "click[no such button]", "click[Back to Search]"]
    turns = iter(actions + ["search[shampoo]"])
    (traj,) = envs.run_episodes("webshop", [4], lambda o, _: ([next(turns)], [None]), max_turns=4)
    env = envs.make("webshop", max_turns=4)
    want = [env.reset(seed=4)[1]["anchor"]] + [env.step(a)[4]["anchor"] for a in actions]
    assert [s["anchor"] for s in traj["steps"]] == want and want[0] == want[3] != want[1]
    keys = {"observation", "action", "action_ids", "reward", "done"}
    assert all(set(s) == keys | {"anchor"} for s in traj["steps"])
    ask = ["Is it an animal?"] * 2, [None] * 2
    for t in envs.run_episodes("twenty_questions_subset", [0, 1], lambda o, _: ask, max_turns=1):
        assert all(set(s) == keys for s in t["steps"])


def test_scripted_policy_leaves_room_for_rl():
    """On the 10-word subset the sub-optimal questioner sits well below a greedy questioner."""
    from envs.collect import collect_scripted, summarize

    weak = summarize(collect_scripted("twenty_questions_subset", 300, seed=0))
    good = summarize(collect_scripted("twenty_questions_subset", 300, seed=0, mode="greedy"))
    assert good["success_rate"] > 0.95 and good["mean_return"] > -5
    assert weak["mean_return"] < good["mean_return"] - 3
    assert 0.3 < weak["success_rate"] < 0.98


def test_dataset_round_trip(tmp_path):
    trajs = envs.collect_scripted("guess_my_city", 5, seed=1)
    path = tmp_path / "d.jsonl"
    envs.save_dataset(str(path), trajs)
    assert envs.load_dataset(str(path), env="guess_my_city") == trajs
    assert [json.loads(line)["format_version"] for line in path.read_text().splitlines()] == [1] * 5


def _bad(tmp_path, mutate):
    good = envs.collect_scripted("twenty_questions_subset", 3, seed=0)
    lines = [json.dumps(t) for t in good]
    lines[1] = mutate(good[1])
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: "{not json", "broken JSON"),
        (
            lambda t: json.dumps({k: v for k, v in t.items() if k != "steps"}),
            "missing field 'steps'",
        ),
        (
            lambda t: json.dumps({**t, "return": "high"}),
            "field 'return' must be int or float, got str",
        ),
        (lambda t: json.dumps({**t, "env": "guess_my_city"}), "env mismatch"),
        (lambda t: json.dumps({**t, "steps": []}), "'steps' is empty"),
        (
            lambda t: json.dumps({**t, "steps": [{**t["steps"][0], "action": 3}] + t["steps"][1:]}),
            "step 0: field 'action' must be str",
        ),
        (lambda t: json.dumps({**t, "return": t["return"] - 1}), "rewards sum to"),
        (lambda t: json.dumps({**t, "format_version": 99}), "format_version 99"),
        (lambda t: json.dumps([1, 2]), "expected a JSON object"),
        (lambda t: "", "empty line"),
    ],
)
def test_bad_dataset_lines_name_file_and_line(tmp_path, mutate, message):
    path = _bad(tmp_path, mutate)
    with pytest.raises(ValueError) as e:
        envs.load_dataset(path, env="twenty_questions_subset")
    assert str(e.value).startswith(f"{path}:2: ") and message in str(e.value)


def test_missing_dataset_file_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="envs.collect"):
        envs.load_dataset(str(tmp_path / "nope.jsonl"))


def test_collect_cli_writes_dataset_and_prints_statistics(tmp_path, capsys):
    from envs.collect import main

    out = tmp_path / "20q.jsonl"
    s = main(["--env", "twenty_questions", "--episodes", "50", "--seed", "2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "episodes=50" in printed and "mean_return" in printed and "success_rate" in printed
    data = envs.load_dataset(str(out), env="twenty_questions")
    assert len(data) == 50 and abs(s["mean_return"] - sum(t["return"] for t in data) / 50) < 1e-9


def test_the_documented_collect_command_prints_no_warning(tmp_path):
    """`python -m envs.collect` as the README writes it: the package does not import the module it
    runs (runpy's "found in sys.modules" RuntimeWarning), and a warning-free stderr holds only the
    progress bar."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "envs.collect", "--env", "wordle"]
        + ["--episodes", "3", "--out", str(tmp_path / "w.jsonl")],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.returncode == 0 and "Warning" not in out.stderr, out.stderr
    assert len(envs.load_dataset(str(tmp_path / "w.jsonl"), env="wordle")) == 3


def test_corpus_has_dialogues_and_questions():
    texts = envs.corpus("twenty_questions_subset", 300)
    assert len(texts) == 300 and any(
        t.startswith("Questions:\n") and t.count("\n") > 2 for t in texts
    )


def test_mentions_is_whole_word():
    assert mentions("Is the city you are from Lima?", "Lima")
    assert not mentions("What is the climate like?", "Lima")
    assert mentions("Is it a TENNIS   racket?", "tennis racket")
    assert mentions("Is it São Paulo?", "Sao Paulo") and mentions("Is it Sao Paulo?", "São Paulo")
    assert not mentions("Do you know?", "no") and not mentions("It is not", "no")


def test_import_envs_needs_no_env_package_and_chess_names_its_install():
    """`import envs` works with python-chess unimportable (each env's module is imported when the
    env is first made); making a chess env then raises one clear ImportError naming the fix."""
    code = (
        "import sys; sys.modules['chess'] = None\n"
        "import envs\n"
        "assert 'chess_endgame' in envs.names() and 'envs.chess_env' not in sys.modules\n"
        "envs.make('twenty_questions_subset').reset(seed=0)\n"
        "for name in ('chess_endgame', 'chess'):\n"
        "    try:\n"
        "        envs.make(name)\n"
        "    except ImportError as e:\n"
        "        print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all("need python-chess: pip install chess" in x for x in lines)
