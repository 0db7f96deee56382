"""Scripted questioners that need no model: the sub-optimal data source of the papers, and a greedy
reference questioner that shows how much room there is above it.

The policy reads only the observation. It keeps the targets still consistent with every answer so
far (a target ``c`` is consistent when the knowledge-base oracle would have given the same answers
for ``c``) and then, in ``mode="suboptimal"`` (the default):
- plays category-first: sweeps the game's ``CATEGORY_QUESTIONS`` in their cyclic order from a random
  starting category until one is answered "yes", then asks the game's ``HABIT_QUESTIONS`` (if it has
  any) in their order, then random not-yet-asked questions from the useful bank,
- with probability ``p_useless`` asks an uninformative question instead,
- with probability ``p_early`` guesses a random consistent target before it is sure,
- guesses as soon as one candidate is left.
``mode="greedy"`` asks the question that splits the candidates most evenly and guesses when one is
left (a good questioner, reported next to the sub-optimal one in docs/envs.md).
"""

from __future__ import annotations

import random

from .core import parse_history


def split_line(line: str) -> tuple[str, str] | None:
    """Split a dialogue line "<question>? <answer>" into (question, answer); None if it has
    no '? '."""
    if "? " not in line:
        return None
    q, a = line.split("? ", 1)
    return q + "?", a


class ScriptedPolicy:
    def __init__(
        self,
        module,
        targets,
        seed: int = 0,
        mode: str = "suboptimal",
        p_useless: float = 0.25,
        p_early: float = 0.15,
    ):
        if mode not in ("suboptimal", "greedy"):
            raise ValueError(f"mode must be 'suboptimal' or 'greedy', got {mode!r}")
        self.module, self.targets, self.mode = module, list(targets), mode
        self.p_useless, self.p_early = p_useless, p_early
        self.rng = random.Random(seed)
        self._answers: dict[tuple[str, str], str] = {}
        self._cands: dict[
            str, list[str]
        ] = {}  # observation -> candidates (answers are filtered incrementally)

    def _answer(self, target: str, question: str) -> str:
        key = (target, question)
        if key not in self._answers:
            self._answers[key] = self.module.answer(target, question)
        return self._answers[key]

    def candidates(self, obs: str) -> list[str]:
        """Targets consistent with every parsed (question, answer) line of ``obs``."""
        if obs in self._cands:
            return self._cands[obs]
        lines = parse_history(obs)
        if len(self._cands) > 10_000:
            self._cands.clear()
        prefix = obs[: len(obs) - len(lines[-1]) - 1] if lines else None
        if prefix is not None and prefix in self._cands:  # only the last answer is new
            start, new_pairs = self._cands[prefix], [split_line(lines[-1])]
        else:
            start, new_pairs = self.targets, list(map(split_line, lines))
        pairs = [p for p in new_pairs if p is not None]
        keep = [c for c in start if all(self._answer(c, q) == a for q, a in pairs)]
        if not keep:  # answers from a non-KB oracle can contradict every target: forget the answers
            asked = " ".join(q for q, _ in pairs)
            keep = [
                c for c in self.targets if not self.module.is_correct_guess(c, asked)
            ] or self.targets
        self._cands[obs] = keep
        return keep

    def __call__(self, obs: str) -> str:
        cands = self.candidates(obs)
        asked = {p[0] for p in map(split_line, parse_history(obs)) if p is not None}
        unasked = [q for q in self.module.USEFUL_QUESTIONS if q not in asked]
        if len(cands) == 1 or not unasked:
            return self.module.guess_question(self.rng.choice(cands), self.rng)
        if self.mode == "greedy":

            def worst_group(q):
                groups: dict[str, int] = {}
                for c in cands:
                    groups[self._answer(c, q)] = groups.get(self._answer(c, q), 0) + 1
                return max(groups.values())

            best = min(worst_group(q) for q in unasked)
            if best == len(cands):  # no question separates them: guess
                return self.module.guess_question(self.rng.choice(cands), self.rng)
            return self.rng.choice([q for q in unasked if worst_group(q) == best])
        u = self.rng.random()
        if u < self.p_early:
            return self.module.guess_question(self.rng.choice(cands), self.rng)
        if u < self.p_early + self.p_useless:
            return self.rng.choice(self.module.USELESS_QUESTIONS)
        pairs = [p for p in map(split_line, parse_history(obs)) if p is not None]
        category_hit = any(
            q in self.module.CATEGORY_QUESTIONS and a.lower().startswith("yes") for q, a in pairs
        )
        cats = self.module.CATEGORY_QUESTIONS
        if not category_hit and any(q in unasked for q in cats):
            asked_cats = [cats.index(q) for q, _ in pairs if q in cats]
            # a random first category, then the next one in the game's cyclic order: a player who
            # sweeps the categories in a habitual order (and so is easy to imitate), starting
            # anywhere
            start = asked_cats[-1] + 1 if asked_cats else self.rng.randrange(len(cats))
            return next(
                cats[(start + k) % len(cats)]
                for k in range(len(cats))
                if cats[(start + k) % len(cats)] in unasked
            )
        habit = [q for q in getattr(self.module, "HABIT_QUESTIONS", ()) if q in unasked]
        if habit:  # a habitual order after the sweep (Guess My City): imitable by a small model
            return habit[0]
        return self.rng.choice(unasked)
