"""envs/wordle.py: exact scoring (repeated letters) by hand, rules, rewards, bad input, the
adversarial variant, word lists, scripted policies, datasets and make_vec."""

import itertools
import os
import random
import re

import pytest

import envs
from envs import wordle
from envs.wordle import GUESSES, HEADER, SECRETS, score


# Worked by hand: greens first, then yellows left to right while the secret has an unmatched copy.
@pytest.mark.parametrize(
    "guess, secret, marks",
    [
        ("crane", "crane", "ggggg"),
        # no greens; secret letters a b i d e: the first e takes the only e (y), the second none (b)
        ("speed", "abide", "bbyby"),
        # e at 4 is green; the left-over secret letters t h e r give one yellow e (the first) and
        # one yellow r
        ("eerie", "there", "ybybg"),
        # e at 4 green; left-over e e r i: the e at 2 is yellow, r yellow, t and h black
        ("there", "eerie", "bbyyg"),
        # the secret's only e is matched green at 4, so the guess's e at 1 and 2 are black (a
        # one-pass left-to-right scorer would wrongly make the first one yellow)
        ("geese", "those", "bbbgg"),
        # two l's in each word, none in place: both yellow; the a's are black (no a in hello)
        ("llama", "hello", "yybbb"),
        ("hello", "llama", "bbyyb"),
        # the secret's one a and one r are used by the first a and r; the second r and a are black
        ("array", "ratio", "yybbb"),
        # s at 3 green; one s left over (at 4): the first s is yellow, the s at 2 black
        ("sissy", "bliss", "yybgb"),
        # b at 2 and e at 3 green; left-over b a s: a yellow, the b at 1 yellow, y black
        ("abbey", "babes", "yyggb"),
        ("fghij", "klmno", "bbbbb"),
    ],
)
def test_scoring_by_hand(guess, secret, marks):
    assert score(guess, secret) == marks


def _reference_score(guess, secret):
    """An independent scorer: per letter, min(count in guess, count in secret) marks in all, greens
    first, the remaining marks go to that letter's leftmost non-green positions."""
    marks = ["g" if g == s else "b" for g, s in zip(guess, secret)]
    for letter in set(guess):
        total = min(guess.count(letter), secret.count(letter))
        spare = total - sum(1 for i, g in enumerate(guess) if g == letter and marks[i] == "g")
        for i, g in enumerate(guess):
            if spare > 0 and g == letter and marks[i] == "b":
                marks[i], spare = "y", spare - 1
    return "".join(marks)


def test_scoring_matches_an_independent_scorer_on_random_pairs():
    rng = random.Random(0)
    words = sorted(GUESSES)
    doubled = [w for w in words if len(set(w)) < 5]  # repeated letters: where scorers go wrong
    for _ in range(5000):
        guess, secret = rng.choice(doubled), rng.choice(doubled + SECRETS)
        assert score(guess, secret) == _reference_score(guess, secret), (guess, secret)


def _full():
    """An env over the whole secret list ("abide" is secret 865, past the default 400)."""
    return envs.make("wordle", vocab_size=len(SECRETS))


def test_reference_text_format_and_rewards():
    env = _full()
    obs, info = env.reset(options={"target": "abide"})
    assert obs == "Wordle:\n" and info == {"target": "abide", "turn": 0, "won": False}
    obs, r, term, trunc, info = env.step("s p e e d")
    assert obs == "Wordle:\ns p e e d\nb b y b y\n" and r == -1.0 and not term and not trunc
    obs, r, term, trunc, info = env.step("aside")  # without spaces; a, i, d, e in place, no s
    assert obs.endswith("a s i d e\ng b g g g\n") and r == -1.0 and not term
    obs, r, term, trunc, info = env.step("a b i d e\n")
    assert obs.endswith("a b i d e\ng g g g g\n") and r == 0.0 and term and not trunc
    assert info["won"] and info["target"] == "abide" and info["turn"] == 3
    with pytest.raises(RuntimeError, match="reset"):
        env.step("abide")


def test_six_wrong_guesses_end_the_episode_with_return_minus_six():
    env = _full()
    env.reset(options={"target": "abide"})
    total = 0.0
    for t in range(6):
        obs, r, term, trunc, info = env.step("crane")
        total += r
        assert term == (t == 5) and not trunc and not info["won"]
    assert total == -6.0 and obs.count("c r a n e\nb b y b g\n") == 6
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("crane")


@pytest.mark.parametrize(
    "action, shown",
    [
        ("", ""),
        ("   \n  ", ""),
        ("x" * 10240, "x" * 10),  # 10 KB: shown cut to 10 characters
        ("cran", "cran"),  # 4 letters
        ("c r a n e s", "cranes"),  # 6 letters
        ("zzzzz", "zzzzz"),  # 5 letters, not a word
        ("CRANE", "CRANE"),  # no case folding, as in the reference
        ("crâne", "crâne"),  # unicode
        ("😀😀😀😀😀", "😀😀😀😀😀"),
        ("12345", "12345"),
        ("cr\nane", "cr"),  # only the first line counts
    ],
)
def test_invalid_guesses_cost_one_and_get_an_empty_feedback_line(action, shown):
    env = _full()
    env.reset(options={"target": "abide"})
    obs, r, term, trunc, info = env.step(action)
    assert r == -1.0 and not term and not trunc and not info["won"] and not info["valid"]
    assert obs == HEADER + " ".join(shown) + "\n\n" and info["turn"] == 1
    for _ in range(5):  # invalid guesses use up the six guesses like any other
        obs, r, term, trunc, info = env.step(action)
    assert term and r == -1.0


@pytest.mark.parametrize(
    "action",
    [
        "crane",
        "c r a n e",
        "c r a n e\n",
        "  crane \n",
        "\ncrane",
        "c  r a\tn e",
        "c r a n e\nignored line",
    ],
)
def test_a_guess_with_or_without_spaces_is_the_same(action):
    env = _full()
    env.reset(options={"target": "abide"})
    obs, r, term, _, info = env.step(action)
    assert info["valid"] and obs == HEADER + "c r a n e\nb b y b g\n" and r == -1.0 and not term


def test_parse_history_skips_invalid_guesses():
    obs = HEADER + "z z z z z\n\nc r a n e\nb b y b g\n\n\n"
    assert wordle.parse_history(obs) == (("crane", "bbybg"),)
    assert wordle.candidates(len(SECRETS), (("crane", "bbybg"),)) == tuple(
        w for w in SECRETS if score("crane", w) == "bbybg"
    )


def test_adversarial_secret_is_always_consistent_with_all_feedback():
    env = envs.make("wordle", adversarial=True, vocab_size=200)
    policy = envs.scripted_policy("wordle", seed=3, vocab_size=200)
    changed = 0
    for episode in range(150):
        obs, info = env.reset(seed=episode)
        done, first = False, info["target"]
        while not done:
            obs, r, done, _, info = env.step(policy(obs))
            target = info["target"]
            assert target in env.targets[:200]
            assert all(score(g, target) == f for g, f in wordle.parse_history(obs))
            assert (r == 0.0) == info["won"] == (obs.endswith("g g g g g\n"))
        changed += target != first
    assert changed > 50  # the secret really is re-drawn


def test_options_and_their_errors():
    assert envs.make("wordle").targets == SECRETS[:400]
    assert envs.make("wordle", vocab_size=800).targets == SECRETS[:800]
    with pytest.raises(ValueError, match="valid options"):
        envs.make("wordle", colour="red")
    for bad in (0, len(SECRETS) + 1, "400", True):
        with pytest.raises(ValueError, match="vocab_size"):
            envs.make("wordle", vocab_size=bad)
    env = envs.make("wordle", vocab_size=200)
    with pytest.raises(ValueError, match="unknown target"):
        env.reset(options={"target": SECRETS[300]})
    with pytest.raises(ValueError, match="valid: \\['target'\\]"):
        env.reset(options={"word": "crane"})
    with pytest.raises(ValueError, match="valid modes"):
        envs.scripted_policy("wordle", mode="clever")


def test_wordle_small_is_the_20_secret_game_and_its_data_are_informative():
    """The CPU-scale game: the 20 most common secrets, the same rules; its scripted data (the
    sub-optimal mixture, prob_consistent 0.25) win ~79% of games (2,000 episodes, seed 0: -3.16),
    between a random secret-list guesser and the always-consistent one."""
    env = envs.make("wordle_small")
    assert env.targets == SECRETS[: wordle.SMALL_VOCAB_SIZE] and len(env.targets) == 20
    summary = {
        mode: envs.summarize(envs.collect_scripted("wordle_small", 300, seed=0, mode=mode))
        for mode in ("random", "suboptimal", "consistent")
    }
    ret = [summary[m]["mean_return"] for m in ("random", "suboptimal", "consistent")]
    assert ret[0] + 0.5 < ret[1] < ret[2] - 0.5, summary
    assert 0.6 < summary["suboptimal"]["success_rate"] < 0.95, summary


def test_seeds_repeat_and_targets_spread():
    env = envs.make("wordle", vocab_size=200)
    first = [env.reset(seed=s)[1]["target"] for s in range(50)]
    assert first == [env.reset(seed=s)[1]["target"] for s in range(50)] and len(set(first)) > 30

    def episode(seed):
        policy, (obs, _) = envs.scripted_policy("wordle", seed=7), env.reset(seed=seed)
        done = False
        while not done:
            obs, _, done, _, _ = env.step(policy(obs))
        return obs

    assert [episode(s) for s in range(10)] == [episode(s) for s in range(10)]


def test_word_lists():
    assert len(SECRETS) >= 800 and len(set(SECRETS)) == len(SECRETS)
    assert all(re.fullmatch("[a-z]{5}", w) for w in GUESSES) and set(SECRETS) <= GUESSES
    assert len(GUESSES) > 4 * len(SECRETS)
    assert {"books", "based", "tries"}.isdisjoint(SECRETS) and {"glass", "house"} <= set(SECRETS)


@pytest.mark.skipif(
    not os.path.isdir(wordle.SCOWL_DIR) or not os.path.isfile(wordle.DICT_PATH),
    reason="Debian's scowl / wamerican word lists are not installed "
    "(apt-get install -y scowl wamerican)",
)
def test_shipped_word_lists_rebuild_identically(tmp_path):
    wordle.write_word_lists(str(tmp_path))
    here = os.path.dirname(wordle.__file__)
    for name in ("wordle_secrets.txt", "wordle_guesses.txt"):
        with open(os.path.join(here, name)) as a, open(tmp_path / name) as b:
            assert a.read() == b.read(), name


def _stats(mode, episodes, seed=0, **options):
    s = envs.summarize(envs.collect_scripted("wordle", episodes, seed=seed, mode=mode, **options))
    return s["mean_return"], s["success_rate"]


def test_scripted_policies_order_and_levels():
    greedy, greedy_win = _stats("greedy", 200)
    data, data_win = _stats("suboptimal", 400)
    rand, _ = _stats("random", 100)
    assert greedy > -2.3 and greedy_win > 0.97  # about -1.94 over 5,000 episodes
    assert -4.6 < data < -3.6 and 0.45 < data_win < 0.85  # tuned near the paper's -4.12
    assert rand < -5.5
    for return_ in (greedy, data, rand):
        assert -6 <= return_ <= 0


def test_policies_only_guess_consistent_words_in_their_modes():
    env = envs.make("wordle", vocab_size=200)
    for mode in ("greedy", "consistent"):
        policy = envs.scripted_policy("wordle", seed=1, mode=mode, vocab_size=200)
        for seed in range(30):
            obs, _ = env.reset(seed=seed)
            done = False
            while not done:
                action = policy(obs)
                guess = action.replace(" ", "")
                assert action == " ".join(guess) and guess in env.targets
                assert all(score(g, guess) == f for g, f in wordle.parse_history(obs)), mode
                obs, _, done, _, _ = env.step(guess)


def test_dataset_round_trip_and_text_concatenates(tmp_path):
    trajs = envs.collect_scripted("wordle", 20, seed=4)
    path = tmp_path / "wordle.jsonl"
    envs.save_dataset(str(path), trajs)
    assert envs.load_dataset(str(path), env="wordle") == trajs
    for t in trajs:
        steps = t["steps"]
        assert steps[0]["observation"] == HEADER and len(steps) <= 6
        assert t["return"] == -len(steps) + (1 if t["success"] else 0)
        for a, b in itertools.pairwise(steps):
            assert b["observation"].startswith(a["observation"] + a["action"] + "\n")


def test_collect_cli(tmp_path, capsys):
    from envs.collect import main

    out = tmp_path / "w.jsonl"
    main(["--env", "wordle", "--episodes", "30", "--mode", "greedy", "--out", str(out)])
    assert "episodes=30" in capsys.readouterr().out
    assert len(envs.load_dataset(str(out), env="wordle")) == 30


def test_make_vec_matches_single_envs():
    n = 5
    vec = envs.make_vec("wordle", n)
    obs, infos = vec.reset(seed=10)
    singles = [envs.make("wordle") for _ in range(n)]
    for i, env in enumerate(singles):
        assert env.reset(seed=10 + i)[1]["target"] == infos[i]["target"]
    policy = envs.scripted_policy("wordle", seed=0, mode="consistent")
    while any(vec.active):
        actions = [policy(o) if a else "" for o, a in zip(obs, vec.active)]
        before = list(vec.active)
        obs, rewards, dones, infos = vec.step(actions)
        for i, env in enumerate(singles):
            if before[i]:
                o, r, term, _, info = env.step(actions[i])
                assert (o, r, term, info["won"]) == (obs[i], rewards[i], dones[i], infos[i]["won"])
            else:
                assert rewards[i] == 0.0 and dones[i]


def test_corpus_covers_the_text():
    texts = envs.corpus("wordle", 200)
    assert len(texts) == 200 and sum(t.startswith(HEADER) for t in texts) >= 100
    joined = "".join(texts)
    assert set("abcdefghijklmnopqrstuvwxyz") <= set(joined)
    assert all(m in joined for m in ("g g g g g\n", " y ", " b ", "\n\n"))
