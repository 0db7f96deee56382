"""Wordle: guess a hidden 5-letter word in 6 guesses (LMRL-Gym's text game, used by ILQL and Q-SFT).

    env = envs.make("wordle")                      # options: vocab_size=400, adversarial=False
    obs, info = env.reset(seed=0)                  # obs == "Wordle:\\n"
    obs, reward, terminated, truncated, info = env.step("c r a n e")   # or "crane"

Observation: ``"Wordle:\\n"``, then two lines per guess: the guess as spaced letters
(``"c r a n e\\n"``) and its feedback as spaced marks (``"b y g b b\\n"``: g = right letter,
right place; y = in the word, elsewhere; b = not in the word, or no copy of it left). An invalid
guess (not 5 letters a-z, or not an allowed word) gets an empty feedback line. Reward -1 per
guess, 0 for the guess that solves it (the episode ends there); after 6 guesses the episode ends
(``terminated``: the guess count is part of the state), so returns lie in [-6, 0]. An invalid
guess costs -1 and one of the 6 guesses, like LMRL-Gym's ``bad_word_reward``.

Scoring is the real game's, repeated letters included: greens first, then each other guess letter
is yellow only while the secret still has an unmatched copy of it, left to right ("speed" against
"abide" gives ``b b y b y``: one yellow e, not two).

Deliberate choices (documented in docs/envs.md):
- the default is the ordinary game with a fixed secret, drawn uniformly from the first
  ``vocab_size`` words of ``SECRETS``; ``options={"target": w}`` fixes it. ``adversarial=True`` is
  LMRL-Gym's variant: before each valid guess the secret is re-drawn uniformly among the secrets
  still consistent with all feedback. With a uniform re-draw that variant is the same game *in
  distribution* (a fixed uniform secret is, given the feedback, uniform over the consistent words),
  but a fixed target cannot be evaluated with it.
- LMRL-Gym's feedback ignores repeated letters and its guess list is the secret list; here the
  feedback is exact and any of the ~4,700 common words of ``GUESSES`` may be guessed.
- the action is stripped, cut at its first newline, and all whitespace is removed, so "c r a n e",
  "crane" and "c r a n e\\n" are the same guess; no case folding ("CRANE" is invalid, as in the
  reference). An invalid guess is shown spaced too, cut to ``SHOWN_INVALID`` characters.

Word lists (``wordle_secrets.txt``, ``wordle_guesses.txt`` beside this file) come from Debian's
SCOWL word lists; ``python -m envs.wordle --rebuild-words`` rebuilds them (see
``build_word_lists``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import random
import re

from .core import check_action, reset_target

HEADER = "Wordle:\n"
N_LETTERS, MAX_GUESSES = 5, 6
SHOWN_INVALID = 10
MODES = ("suboptimal", "greedy", "consistent", "random")
DEFAULT_VOCAB_SIZE = 400
# The CPU-scale game registered as "wordle_small": the 20 most common secrets (a tiny model from
# scratch learns it from a few thousand episodes; the 400-word game it does not, docs/benchmark.md).
SMALL_VOCAB_SIZE = 20
# Probability that the data policy guesses a random consistent word (else a random secret-list
# word), tuned per vocabulary size so that its mean return is close to the paper's data (-4.12);
# other sizes use the nearest listed one.
PROB_CONSISTENT = {200: 0.25, 400: 0.32, 800: 0.38}
_HERE = os.path.dirname(os.path.abspath(__file__))
_WORD = re.compile(r"[a-z]{5}")


def _read_words(filename: str) -> list[str]:
    """The words of a shipped list, in file order (lines starting with '#' are comments)."""
    with open(os.path.join(_HERE, filename), encoding="utf-8") as f:
        return [w for w in (line.strip() for line in f) if w and not w.startswith("#")]


SECRETS = _read_words("wordle_secrets.txt")  # most common first; vocab_size takes a prefix
GUESSES = frozenset(_read_words("wordle_guesses.txt")) | frozenset(SECRETS)


@functools.lru_cache(maxsize=1 << 20)
def score(guess: str, secret: str) -> str:
    """Wordle feedback of ``guess`` against ``secret`` as 5 marks from "gyb" (e.g. "bbyby").

    Two passes: exact matches are green; the secret's other letters are counted, and each remaining
    guess letter, left to right, is yellow while a copy of it is left, else black."""
    marks, left = ["b"] * N_LETTERS, {}
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[i] = "g"
        else:
            left[s] = left.get(s, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] == "b" and left.get(g, 0) > 0:
            marks[i] = "y"
            left[g] -= 1
    return "".join(marks)


def spaced(text: str) -> str:
    """ "crane" -> "c r a n e" (the reference format of guesses and feedback)."""
    return " ".join(text)


def parse_guess(action: str) -> str:
    """The guess in an action: stripped, first line only, whitespace removed ("c r a n e" ->
    "crane")."""
    return "".join(action.strip().split("\n", 1)[0].split())


def is_valid(guess: str) -> bool:
    """A guess counts when it is 5 letters a-z and an allowed word."""
    return len(guess) == N_LETTERS and _WORD.fullmatch(guess) is not None and guess in GUESSES


def parse_history(obs: str) -> tuple:
    """The valid (guess, feedback) pairs of an observation, e.g. (("crane", "bbygb"),); invalid
    guesses (empty feedback lines) carry no information and are left out."""
    lines = obs.removeprefix(HEADER).split("\n")
    pairs = []
    for k in range(0, len(lines) - 1, 2):
        guess, feedback = lines[k].replace(" ", ""), lines[k + 1].replace(" ", "")
        if feedback:
            pairs.append((guess, feedback))
    return tuple(pairs)


def _check_vocab_size(vocab_size) -> int:
    ok = isinstance(vocab_size, int) and not isinstance(vocab_size, bool)
    if not ok or not 1 <= vocab_size <= len(SECRETS):
        raise ValueError(
            f"wordle: vocab_size must be an int in [1, {len(SECRETS)}], got {vocab_size!r}"
        )
    return vocab_size


@functools.lru_cache(maxsize=1 << 16)
def candidates(vocab_size: int, history: tuple) -> tuple:
    """The first ``vocab_size`` secrets still consistent with every (guess, feedback) pair of
    ``history`` (computed from the shorter history's answer: one pass per guess per episode)."""
    if not history:
        return tuple(SECRETS[:vocab_size])
    guess, feedback = history[-1]
    return tuple(w for w in candidates(vocab_size, history[:-1]) if score(guess, w) == feedback)


def consistent_words(vocab_size: int, history: tuple) -> tuple:
    """What a scripted policy may guess as "consistent": ``candidates``, else (feedback from a
    secret outside the first ``vocab_size``, e.g. a policy built for a smaller vocabulary than the
    env's) the consistent words of the whole secret list, else the first ``vocab_size`` secrets."""
    return (
        candidates(vocab_size, history)
        or candidates(len(SECRETS), history)
        or tuple(SECRETS[:vocab_size])
    )


class Wordle:
    """The Wordle environment (Gymnasium-style reset/step on strings)."""

    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE, adversarial: bool = False):
        self.vocab_size = _check_vocab_size(vocab_size)
        self.adversarial = bool(adversarial)
        self.name = "wordle"
        self.targets = SECRETS[:vocab_size]
        self.rng = random.Random()
        self.target, self.obs, self.turn, self.done, self.history = None, HEADER, 0, True, ()

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode. ``options={"target": w}`` fixes the secret (in the adversarial
        variant only the first draw: it is re-drawn before every valid guess); otherwise it is drawn
        uniformly with the env's RNG (seeded by ``seed`` when given, so seeded episodes repeat)."""
        if seed is not None:
            self.rng.seed(seed)
        target = reset_target(
            "wordle",
            options,
            self.targets,
            valid=f"the first {self.vocab_size} words of envs.wordle.SECRETS",
        )
        if target is None:
            target = self.rng.choice(self.targets)
        self.target, self.obs, self.turn, self.done, self.history = target, HEADER, 0, False, ()
        return self.obs, {"target": target, "turn": 0, "won": False}

    def step(self, action: str):
        """Make one guess. Returns (obs, reward, terminated, truncated, info)."""
        check_action(self.name, action)
        if self.done:
            raise RuntimeError("wordle: step() called on a finished episode; call reset() first")
        guess = parse_guess(action if isinstance(action, str) else str(action))
        valid = is_valid(guess)
        feedback = ""
        if valid:
            if self.adversarial:
                self.target = self.rng.choice(candidates(self.vocab_size, self.history))
            feedback = score(guess, self.target)
            self.history += ((guess, feedback),)
        else:
            guess = guess[:SHOWN_INVALID]
        won = valid and guess == self.target
        self.turn += 1
        self.obs += spaced(guess) + "\n" + spaced(feedback) + "\n"
        self.done = won or self.turn >= MAX_GUESSES
        info = {"target": self.target, "turn": self.turn, "won": won, "valid": valid}
        return self.obs, 0.0 if won else -1.0, self.done, False, info


_MAKE_OPTIONS = ("vocab_size", "adversarial")


def make(**options) -> Wordle:
    """A Wordle env. Options: ``vocab_size`` (secrets are the first ``vocab_size`` words of
    ``SECRETS``; LMRL-Gym's official subsets have 200/400/800 words; default 400, their default) and
    ``adversarial`` (default False; True re-draws the secret among the still-consistent words before
    every guess, as LMRL-Gym does)."""
    unknown = set(options) - set(_MAKE_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown option(s) {sorted(unknown)} for env 'wordle'; "
            f"valid options: {sorted(_MAKE_OPTIONS)}"
        )
    return Wordle(**options)


@functools.lru_cache(maxsize=1 << 14)
def best_guesses(vocab_size: int, history: tuple) -> tuple:
    """The consistent words that minimise the expected number of consistent words left after the
    guess (sum of squared feedback-class sizes), in secret-list order (see ``consistent_words``)."""
    pool = consistent_words(vocab_size, history)
    if len(pool) <= 2:
        return pool
    best, best_cost = [], None
    for guess in pool:
        sizes = {}
        for secret in pool:
            fb = score(guess, secret)
            sizes[fb] = sizes.get(fb, 0) + 1
        cost = sum(n * n for n in sizes.values())
        if best_cost is None or cost < best_cost:
            best, best_cost = [guess], cost
        elif cost == best_cost:
            best.append(guess)
    return tuple(best)


class WordlePolicy:
    """A scripted guesser that reads only the observation text.

    Modes: "suboptimal" (the papers' data policy: with probability ``prob_consistent`` a random
    secret consistent with all feedback, else a random secret-list word), "greedy" (the consistent
    word that minimises the expected number of remaining candidates; ties broken at random),
    "consistent" (always a random consistent word) and "random" (always a random secret-list word).
    Guesses come spaced."""

    def __init__(
        self,
        seed: int = 0,
        mode: str = MODES[0],
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        prob_consistent: float | None = None,
    ):
        if mode not in MODES:
            raise ValueError(
                f"wordle: unknown scripted-policy mode {mode!r}; valid modes: {list(MODES)}"
            )
        self.vocab_size, self.mode = _check_vocab_size(vocab_size), mode
        default = PROB_CONSISTENT[min(PROB_CONSISTENT, key=lambda k: abs(k - vocab_size))]
        self.prob_consistent = default if prob_consistent is None else float(prob_consistent)
        self.rng = random.Random(seed)

    def __call__(self, obs: str) -> str:
        history = parse_history(obs)
        mode = self.mode
        if mode == "suboptimal":
            mode = "consistent" if self.rng.random() < self.prob_consistent else "random"
        if mode == "greedy":
            choices = best_guesses(self.vocab_size, history)
        elif mode == "consistent":
            choices = consistent_words(self.vocab_size, history)
        else:
            choices = SECRETS[: self.vocab_size]
        return spaced(self.rng.choice(choices))


def scripted_policy(
    seed: int = 0,
    mode: str = MODES[0],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    adversarial: bool = False,
    prob_consistent: float | None = None,
) -> WordlePolicy:
    """A scripted guesser (see ``WordlePolicy``); ``adversarial`` is accepted for symmetry with
    ``make`` and changes nothing (the policy only reads the feedback)."""
    return WordlePolicy(
        seed=seed, mode=mode, vocab_size=vocab_size, prob_consistent=prob_consistent
    )


def _play(env: Wordle, policy, seed: int, first: str | None = None) -> str:
    """The final observation of one episode; ``first`` (when given) replaces the first guess."""
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        action = first if first is not None and obs == HEADER else policy(obs)
        obs, _, done, _, _ = env.step(action)
    return obs


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` sample texts: whole episodes (three quarters; the data policy's and the greedy one's,
    every tenth opening with an invalid guess), then spaced words of the guess list (for the
    ``tiny`` tokenizer)."""
    rng = random.Random(seed)
    env = make()
    policies = [scripted_policy(seed, "suboptimal"), scripted_policy(seed, "greedy")]
    n_episodes = max(n - n // 4, (n + 1) // 2)
    texts = []
    for i in range(n_episodes):
        first = "x y z z y" if i % 10 == 9 else None  # shows the empty feedback line
        texts.append(_play(env, policies[i % 2], seed * 100_003 + i, first))
    words = sorted(GUESSES)
    texts += [spaced(w) for w in rng.sample(words, min(len(words), n - len(texts)))]
    return texts[:n]


# ---- building the shipped word lists (once; needs Debian's `scowl` and `wamerican` packages) ----

SCOWL_DIR, DICT_PATH = "/usr/share/dict/scowl", "/usr/share/dict/american-english"
SECRET_LEVELS = (10, 20)


def _inflected(word: str, lexicon: set) -> bool:
    """True for a plural / third person / past tense whose stem is a word ("books", "tries",
    "based", "tried", "stopped"); words ending in "ss" are never plurals ("glass")."""
    if word.endswith("ss"):
        return False
    stems = []
    if word.endswith("s"):
        stems += [word[:-1]]
    if word.endswith("es"):
        stems += [word[:-2]]
    if word.endswith(("ies", "ied")):
        stems += [word[:-3] + "y"]
    if word.endswith("ed"):
        stems += [word[:-1], word[:-2]]
        if word[-3] == word[-4]:
            stems += [word[:-3]]
    return any(len(s) >= 3 and s in lexicon for s in stems)


def _scowl_level(scowl_dir: str, level: int) -> set:
    words = set()
    for kind in ("english", "american"):
        path = os.path.join(scowl_dir, f"{kind}-words.{level}")
        with open(path, encoding="utf-8", errors="replace") as f:
            words.update(w for w in (line.strip() for line in f) if _WORD.fullmatch(w))
    return words


def build_word_lists(scowl_dir: str = SCOWL_DIR, dict_path: str = DICT_PATH) -> tuple[list, list]:
    """(secrets, guesses) from Debian's word lists.

    guesses: every lowercase 5-letter a-z word of ``wamerican``'s /usr/share/dict/american-english
    (SCOWL size 50), alphabetical. secrets: the 5-letter words of SCOWL's two most common levels (10
    and 20; english + american lists of the ``scowl`` package), minus plurals and past tenses of
    shorter words, ordered by level, then by the SHA-1 of the word (a fixed pseudo-random order, so
    any prefix is a spread-out sample of common words)."""
    with open(dict_path, encoding="utf-8", errors="replace") as f:
        lexicon = {w for w in (line.strip() for line in f) if re.fullmatch(r"[a-z]+", w)}
    guesses = sorted(w for w in lexicon if len(w) == N_LETTERS)
    secrets, seen = [], set()
    for level in SECRET_LEVELS:
        words = [
            w
            for w in _scowl_level(scowl_dir, level) - seen
            if w in lexicon and not _inflected(w, lexicon)
        ]
        secrets += sorted(words, key=lambda w: hashlib.sha1(w.encode()).hexdigest())
        seen.update(words)
    return secrets, guesses


_SECRETS_HEADER = """\
# Wordle secret words, most common first (envs.make("wordle", vocab_size=k) uses the first k).
# Built by `python -m envs.wordle --rebuild-words` from Debian's `scowl` package (2020.12.07):
# the lowercase 5-letter a-z words of SCOWL levels 10 and 20 (english-words.* + american-words.*)
# that are in `wamerican`'s /usr/share/dict/american-english, minus plurals / third persons / past
# tenses of shorter words ("books", "tries", "based"); ordered by level, then by SHA-1 of the word.
# {n} words.
"""
_GUESSES_HEADER = """\
# Wordle allowed guesses: every lowercase 5-letter a-z word of Debian's `wamerican` (2020.12.07)
# /usr/share/dict/american-english (SCOWL size 50). Built by
# `python -m envs.wordle --rebuild-words`. {n} words.
"""


def write_word_lists(
    folder: str = _HERE, scowl_dir: str = SCOWL_DIR, dict_path: str = DICT_PATH
) -> None:
    """Rebuild ``wordle_secrets.txt`` and ``wordle_guesses.txt`` in ``folder``."""
    secrets, guesses = build_word_lists(scowl_dir, dict_path)
    for name, header, words in (
        ("wordle_secrets.txt", _SECRETS_HEADER, secrets),
        ("wordle_guesses.txt", _GUESSES_HEADER, guesses),
    ):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(header.format(n=len(words)) + "\n".join(words) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description="Wordle word lists (see build_word_lists).")
    p.add_argument(
        "--rebuild-words",
        action="store_true",
        help="rebuild envs/wordle_*.txt (needs: apt-get install -y scowl wamerican)",
    )
    p.add_argument("--scowl-dir", default=SCOWL_DIR)
    p.add_argument("--dict", default=DICT_PATH)
    args = p.parse_args(argv)
    if args.rebuild_words:
        write_word_lists(_HERE, args.scowl_dir, args.dict)
        print(f"wrote {_HERE}/wordle_secrets.txt and wordle_guesses.txt")
    else:
        print(f"{len(SECRETS)} secrets, {len(GUESSES)} allowed guesses; --rebuild-words to rebuild")


if __name__ == "__main__":
    main()
