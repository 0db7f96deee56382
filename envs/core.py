"""The question-asking game shared by Twenty Questions and Guess My City.

Both games have the same mechanics (ArCHer App. A, LMRL-Gym): a hidden target, the agent asks one
question per turn, the oracle answers, reward -1 per question and 0 for the question that names the
target (which ends the episode), at most 20 questions. Only the oracle and the win check differ, so
each game module (``envs/twenty_questions.py``, ``envs/guess_my_city.py``) supplies those and this
file supplies the environment.

Observation: ``"Questions:\\n"`` followed by one line ``"<question> <answer>\\n"`` per turn so far.

Deliberate choices (documented in docs/envs.md):
- hitting the 20-question cap is a *terminal* state (``terminated=True``), not a truncation: the
  number of questions asked is part of the state in these games (docs/equations.md §1: "turn limit
  is terminal").
- the action is stripped and cut at its first newline; an empty action is answered like any
  question the oracle cannot parse and costs a turn.
"""

from __future__ import annotations

import functools
import random
import re
import unicodedata
from typing import Callable

HEADER = "Questions:\n"


@functools.lru_cache(maxsize=1 << 16)
def normalize(text: str) -> str:
    """Lower-case, strip accents, split glued words at a lower-to-upper case change ("dogIs" -> "dog
    is", as in utterances a model glues together), turn every non-alphanumeric run into one
    space."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()).strip() + " "


def mentions(text: str, phrase: str) -> bool:
    """True when ``phrase`` occurs in ``text`` as whole words (case/accent/punctuation-insensitive).

    "climate" does not mention "lima"; "Is it a tennis racket?" mentions "tennis racket". A trailing
    plural "s"/"es" on the last word is accepted ("bananas")."""
    t, p = normalize(text), normalize(phrase).strip()
    if not p:
        return False
    return _phrase_regex(p).search(t) is not None


@functools.lru_cache(maxsize=1 << 14)
def _phrase_regex(p: str):
    return re.compile(r" " + re.escape(p) + r"(?:s|es)? ")


def parse_history(obs: str) -> list[str]:
    """The dialogue lines of an observation (everything after the header), without newlines."""
    body = obs[len(HEADER) :] if obs.startswith(HEADER) else obs
    return [line for line in body.split("\n") if line]


def check_action(name: str, action) -> None:
    """Every env's step() starts here: the action is the agent's utterance, a str."""
    if not isinstance(action, str):
        raise TypeError(f"{name}: step() takes the utterance as a str, got {type(action).__name__}")


def reset_target(name: str, options: dict | None, targets: list[str], valid: str | None = None):
    """The target a ``reset(options=...)`` asks for (None if none), after checking that "target" is
    the only option and that it is one of ``targets``; the errors name the env and the valid choices
    (``valid`` describes them where the list is too long to print)."""
    options = dict(options or {})
    unknown = set(options) - {"target"}
    if unknown:
        raise ValueError(f"{name}: unknown reset option(s) {sorted(unknown)}; valid: ['target']")
    target = options.get("target")
    if target is not None and target not in targets:
        raise ValueError(f"{name}: unknown target {target!r}; valid targets: {valid or targets}")
    return target


class QuestionGame:
    """A Gymnasium-style environment on strings (reset/step), one hidden target per episode."""

    def __init__(
        self,
        name: str,
        targets: list[str],
        answer: Callable[[str, str], str],
        is_correct_guess: Callable[[str, str], bool],
        max_turns: int = 20,
    ):
        if not targets:
            raise ValueError(f"{name}: the target list is empty")
        if max_turns < 1:
            raise ValueError(f"{name}: max_turns must be >= 1, got {max_turns}")
        self.name, self.targets, self.max_turns = name, list(targets), max_turns
        self.answer_fn, self.is_correct_guess = answer, is_correct_guess
        self.rng = random.Random()
        self.target, self.obs, self.turn, self.done = None, HEADER, 0, True

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode. ``options={"target": ...}`` fixes the secret; otherwise it is drawn
        uniformly with the env's RNG (seeded by ``seed`` when given, so seeded episodes repeat)."""
        if seed is not None:
            self.rng.seed(seed)
        target = reset_target(self.name, options, self.targets)
        if target is None:
            target = self.rng.choice(self.targets)
        self.target, self.obs, self.turn, self.done = target, HEADER, 0, False
        return self.obs, {"target": target, "turn": 0, "won": False}

    def step(self, action: str):
        """Ask one question. Returns (obs, reward, terminated, truncated, info)."""
        check_action(self.name, action)
        if self.done:
            raise RuntimeError(
                f"{self.name}: step() called on a finished episode; call reset() first"
            )
        question = action.split("\n", 1)[0].strip()
        won = bool(question) and self.is_correct_guess(self.target, question)
        reply = self.answer_fn(self.target, question)
        self.turn += 1
        self.obs = self.obs + f"{question} {reply}\n"
        reward = 0.0 if won else -1.0
        self.done = won or self.turn >= self.max_turns
        info = {"target": self.target, "turn": self.turn, "won": won}
        return self.obs, reward, self.done, False, info


class VecEnv:
    """Steps a list of envs together for batched rollouts.

    ``reset(seed)`` resets every env (env i gets seed ``seed + i``); ``step(actions)`` takes one
    action per env and steps only the envs still running: a finished env keeps its last observation
    and returns reward 0 and done. ``active`` lists which envs are still running."""

    def __init__(self, envs: list):
        if not envs:
            raise ValueError("VecEnv needs at least one env")
        self.envs = envs
        self.obs = [HEADER] * len(envs)
        self.active = [False] * len(envs)
        self.infos = [{} for _ in envs]

    def __len__(self):
        return len(self.envs)

    def reset(self, seed: int | None = None, targets: list | None = None):
        out = []
        for i, env in enumerate(self.envs):
            opts = {"target": targets[i]} if targets is not None else None
            out.append(env.reset(seed=None if seed is None else seed + i, options=opts))
        self.obs = [o for o, _ in out]
        self.infos = [info for _, info in out]
        self.active = [True] * len(self.envs)
        return list(self.obs), list(self.infos)

    def step(self, actions: list[str]):
        if len(actions) != len(self.envs):
            raise ValueError(f"VecEnv.step: got {len(actions)} actions for {len(self.envs)} envs")
        rewards, dones = [0.0] * len(self.envs), [True] * len(self.envs)
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            if not self.active[i]:
                continue
            obs, r, term, trunc, info = env.step(action)
            self.obs[i], self.infos[i], rewards[i] = obs, info, r
            dones[i] = term or trunc
            self.active[i] = not dones[i]
        return list(self.obs), rewards, dones, [dict(x) for x in self.infos]
