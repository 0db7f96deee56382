"""VirtualHome (TWOSOME / POAD): household tasks in a four-room house, one text action per turn.

The reference (TWOSOME's ``VirtualHome-v1`` / ``-v2`` on VirtualHome's evolving-graph simulator,
with POAD's prompts and action texts) reduces the house graph to the facts below; we simulate
exactly those facts, so no Unity or graph files are needed. The house: kitchen, living room,
bathroom, bedroom; the agent starts in the kitchen; it sees only the room it is in; walking to an
object brings it to that object's room and close to it (and to nothing else); it holds up to two
things.

Food preparation (``task="food_preparation"``): a pancake and a microwave are in the kitchen. Ten
actions: walk to the living room / kitchen / bathroom / bedroom / pancake / microwave, grab the
pancake, put the pancake in the microwave (fails unless the microwave is open), open / close the
microwave. +1 and done as soon as the pancake is in the closed microwave (the reference: "in the
kitchen and the pancake is not visible"). Best: 6 actions. Variants (POAD Table 2, option
``variant``): the pancake becomes a hamburger, pizza, cheese or apple pie; or (pancake, microwave)
becomes (dishes, dishwasher) or (clothes, washing machine).

Entertainment (``task="entertainment"``): chips and milk in the kitchen; a coffee table, a TV and a
sofa in the living room. Seventeen actions: walk to the four rooms / chips / milk / coffee table /
TV / sofa, grab the chips / milk, put the chips / milk on the coffee table, turn on / off the TV,
sit on the sofa, stand up from the sofa. The TV can only be switched on with a free hand, walking
fails while sitting, and one can sit only when the TV is on (the reference's action lists). +1 and
done when the agent sits on the sofa in front of the switched-on TV with the chips and the milk each
in hand or on the coffee table. Best: 11.

Both: reward 0 otherwise; at most 50 actions (then ``truncated``). The available actions depend on
the state (the reference's lists); an utterance that matches none of them (exact, then case-,
punctuation- and whitespace-insensitive on its first line, see ``envs.overcooked.match_action``) is
invalid: reward ``-invalid_penalty`` (default 0.1), no state change, and it counts as one of the 50
actions. An available action that fails in the simulator (opening an open microwave, walking while
seated) changes nothing.

Observation: the reference's description (POAD wording), the available actions, then the goal
sentence that the action continues::

    There are four rooms: the kitchen, bathroom, bedroom, and living room. You are in the
    kitchen. You notice pancake and microwave. Currently, you are not grabbing anything in hand. ...
    Available actions:
    - walk to the living room
    ...
    In order to heat up the pancake in the microwave, your next step is to

Where we differ from the reference (deliberately): the descriptions are regenerated from the state
(no duplicated or contradictory sentences such as "The TV is not close to you." next to the coffee
table; "not opend" spelled right; plural verbs for dishes / clothes; the washing variants say
"wash", not "heat up"; the object in the open appliance is mentioned); four action-list bugs are
fixed: the reference offers nothing next to the switched-off TV with empty hands, only room walks
(which fail) while seated (we add "stand up from the sofa"), only the room walks next to the coffee
table with empty hands (we add walking to the TV / sofa), and in the kitchen "walk to" the object
that is not there (we offer the one that is); free-text actions with an invalid-action penalty.
"""

from __future__ import annotations

import random
import re

from .core import reset_target
from .overcooked import MixedPolicy, episode_texts, match_action, mix_corpus, parse_actions

MODES = ("suboptimal", "optimal")  # scripted policies: the data policy first
TASKS = ("food_preparation", "entertainment")
ROOMS = ("living room", "kitchen", "bathroom", "bedroom")  # the reference's action order
HOUSE = "There are four rooms: the kitchen, bathroom, bedroom, and living room."
# variant -> (object, appliance, verb, plural object)
VARIANTS = {
    "pancake": ("pancake", "microwave", "heat up", False),
    "hamburger": ("hamburger", "microwave", "heat up", False),
    "pizza": ("pizza", "microwave", "heat up", False),
    "cheese": ("cheese", "microwave", "heat up", False),
    "apple pie": ("apple pie", "microwave", "heat up", False),
    "dishes": ("dishes", "dishwasher", "wash", True),
    "clothes": ("clothes", "washing machine", "wash", True),
}
_OPTIONS = {"task", "variant", "max_turns", "invalid_penalty"}


def _hands(held: list[str]) -> str:
    if not held:
        return "Currently, you are not grabbing anything in hand."
    return f"Currently, you have grabbed {' and '.join('the ' + h for h in held)} in hand."


class FoodPreparation:
    """Put the object into the closed appliance (pancake into microwave by default)."""

    def __init__(self, variant: str = "pancake"):
        if variant not in VARIANTS:
            raise ValueError(
                f"virtualhome: unknown variant {variant!r}; valid variants: {list(VARIANTS)}"
            )
        self.variant = variant
        obj, app, self.verb, plural = VARIANTS[variant]
        self.obj, self.app, self.is_ = obj, app, "are" if plural else "is"
        self.texts = [f"walk to the {r}" for r in ROOMS] + [
            f"walk to the {obj}",
            f"walk to the {app}",
            f"grab the {obj}",
            f"put the {obj} in the {app}",
            f"open the {app}",
            f"close the {app}",
        ]
        self.goal = f"In order to {self.verb} the {obj} in the {app}, your next step is to"

    def reset(self):
        self.room, self.near = "kitchen", None  # near: None, "obj" or "app"
        self.holding, self.open, self.inside = False, False, False

    def complete(self) -> bool:
        return self.room == "kitchen" and self.inside and not self.open

    def _close(self):
        """(close to the object, close to the appliance)."""
        at_app = self.room == "kitchen" and self.near == "app"
        return self.holding or self.near == "obj" or (at_app and self.inside), at_app

    def available(self) -> list[int]:
        if self.room != "kitchen":
            return [i for i in range(4) if ROOMS[i] != self.room]
        rooms = [0, 2, 3]
        if self.inside and not self.open:
            return rooms
        near_obj, near_app = self._close()
        if self.holding:
            return rooms + ([4, 7, 8, 9] if near_app else [4, 5])
        if near_obj and near_app:
            return rooms + ([8, 9] if self.open else [9])
        return rooms + ([5, 6] if near_obj else [4, 8, 9] if near_app else [4, 5])

    def apply(self, a: int):
        if a < 4:
            self.room, self.near = ROOMS[a], None
        elif a in (4, 5):
            self.room = "kitchen"
            self.near = "app" if a == 5 or self.inside else "obj"
        elif a == 6:
            self.holding = True
        elif a == 7 and self.open:
            self.holding, self.inside = False, True
        elif a in (8, 9):
            self.open = a == 8

    def describe(self) -> str:
        obj, app, is_ = self.obj, self.app, self.is_
        if self.room != "kitchen":
            held = [obj] if self.holding else []
            return f"{HOUSE} You are in the {self.room} and notice nothing useful. {_hands(held)}"
        s = [f"{HOUSE} You are in the kitchen."]
        if self.inside and not self.open:
            return " ".join(s + [f"The {obj} {is_} in the {app}.", f"The {app} is closed."])
        s.append(f"You notice {obj} and {app}.")
        near_obj, near_app = self._close()
        if self.holding:
            s += [
                _hands([obj]),
                f"The {app} is close to you." if near_app else f"The {app} is not close to you.",
            ]
        else:
            s.append(_hands([]))
            if near_obj and near_app:
                s.append(f"The {obj} and the {app} are close to you.")
            elif near_obj or near_app:
                s.append(
                    f"The {obj} {is_} close to you." if near_obj else f"The {app} is close to you."
                )
            else:
                s.append(f"The {obj} and the {app} are not close to you.")
        if self.inside:
            s.append(f"The {obj} {is_} in the {app}.")
        s.append(f"The {app} is opened." if self.open else f"The {app} is not opened.")
        return " ".join(s)


class Entertainment:
    """Bring the chips and the milk to the living room, switch the TV on and sit on the sofa."""

    FOODS = ("chips", "milk")
    FURNITURE = ("coffee table", "TV", "sofa")
    IS = {"chips": "are", "milk": "is"}

    def __init__(self):
        self.variant = "entertainment"
        f, t = self.FOODS, self.FURNITURE
        self.texts = (
            [f"walk to the {r}" for r in ROOMS]
            + [f"walk to the {x}" for x in f + t]
            + [f"grab the {x}" for x in f]
            + [f"put the {x} on the coffee table" for x in f]
            + ["turn on the TV", "turn off the TV", "sit on the sofa", "stand up from the sofa"]
        )
        self.goal = (
            "In order to enjoy the chips and the milk while watching TV, your next step is to"
        )

    def reset(self):
        self.room, self.near, self.tv_on, self.sitting = "kitchen", None, False, False
        self.where = {"chips": "kitchen", "milk": "kitchen"}  # kitchen / hand / table

    def held(self) -> list[str]:
        return [x for x in self.FOODS if self.where[x] == "hand"]

    def complete(self) -> bool:
        return (
            self.room == "living room"
            and self.sitting
            and self.tv_on
            and "kitchen" not in self.where.values()
        )

    def available(self) -> list[int]:
        rooms = [i for i in range(4) if ROOMS[i] != self.room]
        if self.room == "kitchen":
            acts = []
            for i, x in enumerate(self.FOODS):
                if self.where[x] == "kitchen":
                    acts.append(9 + i if self.near == x else 4 + i)
            return rooms + sorted(acts)
        if self.room != "living room":
            return rooms
        if self.sitting:
            return rooms + [16]
        held = self.held()
        if self.near is None:
            return rooms + [6, 7, 8]
        if self.near == "coffee table":
            return rooms + [7, 8] + [11 + self.FOODS.index(x) for x in held]
        if self.near == "TV":
            return rooms + [6, 8] + ([13, 14] if not self.tv_on and len(held) < 2 else [])
        return rooms + [6, 7] + ([15, 16] if self.tv_on else [])

    def apply(self, a: int):
        if a <= 8:
            if self.sitting:
                return  # VirtualHome: one cannot walk while sitting
            if a < 4:
                self.room, self.near = ROOMS[a], None
            elif a < 6:
                self.room, self.near = "kitchen", self.FOODS[a - 4]
            else:
                self.room, self.near = "living room", self.FURNITURE[a - 6]
        elif a <= 10:
            self.where[self.FOODS[a - 9]] = "hand"
        elif a <= 12:
            self.where[self.FOODS[a - 11]] = "table"
        elif a <= 14:
            self.tv_on = a == 13
        else:
            self.sitting = a == 15

    def describe(self) -> str:
        held = self.held()
        if self.room == "kitchen":
            here = [x for x in self.FOODS if self.where[x] in ("kitchen", "hand")]
            seen = [
                "notice nothing",
                f"only notice {here[0]}" if here else "",
                "notice chips and milk",
            ]
            s = [f"{HOUSE} You are in the kitchen and {seen[len(here)]}."]
            for x in here:
                if self.where[x] == "kitchen":
                    s.append(
                        f"The {x} {self.IS[x]} close to you. But you have not grabbed the {x}."
                        if self.near == x
                        else f"The {x} {self.IS[x]} not close to you."
                    )
            return " ".join(s + [_hands(held)])
        if self.room != "living room":
            return f"{HOUSE} You are in the {self.room} and notice nothing. {_hands(held)}"
        s = [f"{HOUSE} You are in the living room and you notice a coffee table, a TV and a sofa."]
        if self.sitting:
            s.append("You are sitting on the sofa.")
        else:
            s.append(
                "They are not close to you."
                if self.near is None
                else f"The {self.near} is close to you."
            )
        s.append("The TV is turned on." if self.tv_on else "The TV is turned off.")
        on_table = [x for x in self.FOODS if self.where[x] == "table"]
        if on_table:
            s.append(
                f"{' and '.join('the ' + x for x in on_table).capitalize()} "
                f"{'are' if len(on_table) > 1 else self.IS[on_table[0]]} on the coffee table."
            )
        return " ".join(s + [_hands(held)])


class VirtualHomeEnv:
    """A Gymnasium-style env on strings (``reset`` / ``step(text)``); see the module docstring."""

    def __init__(
        self,
        task: str = "food_preparation",
        variant: str | None = None,
        max_turns: int = 50,
        invalid_penalty: float = 0.1,
    ):
        if task not in TASKS:
            raise ValueError(f"virtualhome: unknown task {task!r}; valid tasks: {list(TASKS)}")
        if task == "entertainment" and variant not in (None, "entertainment"):
            raise ValueError("virtualhome: the entertainment task has no variants")
        if max_turns < 1:
            raise ValueError(f"virtualhome: max_turns must be >= 1, got {max_turns}")
        self.task = (
            FoodPreparation(variant or "pancake") if task == "food_preparation" else Entertainment()
        )
        self.name, self.targets = "virtualhome", [self.task.variant]
        self.max_turns, self.invalid_penalty = max_turns, float(invalid_penalty)
        self.rng = random.Random()
        self.done, self.obs, self.actions = True, "", []

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode (the house always starts the same; ``seed`` only seeds ``self.rng``).
        ``options={"target": t}`` is accepted for the evaluation contract (the only target is the
        task's object, e.g. "pancake", or "entertainment")."""
        if seed is not None:
            self.rng.seed(seed)
        reset_target(self.name, options, self.targets)  # validates: the task is the only target
        self.task.reset()
        self.turn, self.done, self.won = 0, False, False
        self._render()
        return self.obs, self._info(False)

    def _render(self):
        self.action_ids = self.task.available()
        self.actions = [self.task.texts[i] for i in self.action_ids]
        self.obs = (
            self.task.describe()
            + "\nAvailable actions:\n"
            + "".join(f"- {a}\n" for a in self.actions)
            + self.task.goal
        )

    def parse_action(self, action) -> int | None:
        """Index (into ``self.actions``) of the available action ``action`` names, or None."""
        return match_action(action, self.actions)

    def step(self, action: str):
        """Take one action. Returns (obs, reward, terminated, truncated, info)."""
        if self.done:
            raise RuntimeError(
                f"{self.name}: step() called on a finished episode; call reset() first"
            )
        idx = self.parse_action(action)
        self.turn += 1
        if idx is None:
            reward = -self.invalid_penalty
        else:
            self.task.apply(self.action_ids[idx])
            self.won = self.task.complete()
            reward = 1.0 if self.won else 0.0
        truncated = not self.won and self.turn >= self.max_turns
        self.done = self.won or truncated
        self._render()
        return self.obs, reward, self.won, truncated, self._info(idx is None)

    def _info(self, invalid: bool) -> dict:
        return {
            "target": self.task.variant,
            "won": self.won,
            "valid_actions": list(self.actions),
            "invalid": invalid,
            "turn": self.turn,
        }


def make(task: str = "food_preparation", **options) -> VirtualHomeEnv:
    """Options: ``task`` ("food_preparation" or "entertainment"), ``variant`` (food preparation
    only: one of ``VARIANTS``, default "pancake"), ``max_turns`` (default 50), ``invalid_penalty``
    (default 0.1)."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(
            f"virtualhome: unknown option(s) {sorted(unknown)}; valid options: {sorted(_OPTIONS)}"
        )
    return VirtualHomeEnv(task=task, **options)


# --- scripted policies ----------------------------------------------------------------------------
_FOOD_GOAL = re.compile(
    r"In order to (?:heat up|wash) the (.+?) in the (.+?), your next step is to"
)


def greedy_food(obs: str) -> str:
    """The 6-action plan read off the observation: walk to the object, grab it, walk to the
    appliance, open it, put the object in, close it (works for every variant)."""
    m = _FOOD_GOAL.search(obs)
    obj, app = m.groups() if m else ("pancake", "microwave")
    acts = parse_actions(obs)
    if "walk to the kitchen" in acts:
        return "walk to the kitchen"
    if re.search(rf"The {re.escape(obj)} (is|are) in the {re.escape(app)}\.", obs):
        return f"close the {app}" if f"close the {app}" in acts else f"walk to the {app}"
    put = f"put the {obj} in the {app}"
    if put in acts:
        return put if f"The {app} is opened." in obs else f"open the {app}"
    if f"grabbed the {obj}" in obs:
        return f"walk to the {app}"
    return f"grab the {obj}" if f"grab the {obj}" in acts else f"walk to the {obj}"


def greedy_entertainment(obs: str) -> str:
    """The 11-action plan read off the observation: fetch the chips, then the milk, go to the living
    room, put the chips on the coffee table to free a hand, switch the TV on, sit on the sofa."""
    acts = parse_actions(obs)
    hands = re.search(r"Currently, you have grabbed ([a-z ]+) in hand\.", obs)
    held = [x for x in ("chips", "milk") if hands and f"the {x}" in hands.group(1)]
    on_table = [
        x
        for x in ("chips", "milk")
        if re.search(rf"the {x}[a-z ]* on the coffee table\.", obs, re.I)
    ]
    if "sitting on the sofa" in obs:
        return "stand up from the sofa"
    if "You are in the kitchen" in obs:
        for x in ("chips", "milk"):
            for a in (f"grab the {x}", f"walk to the {x}"):
                if a in acts:
                    return a
        return "walk to the living room"
    if "You are in the living room" not in obs:
        return "walk to the living room" if len(held) == 2 else "walk to the kitchen"
    if len(held) + len(on_table) < 2:
        return "walk to the kitchen"
    if "The TV is turned on." in obs:
        return "sit on the sofa" if "sit on the sofa" in acts else "walk to the sofa"
    if len(held) == 2:
        put = "put the chips on the coffee table"
        return put if put in acts else "walk to the coffee table"
    return "turn on the TV" if "turn on the TV" in acts else "walk to the TV"


def scripted_policy(
    seed: int = 0, mode: str = "suboptimal", task: str = "food_preparation", **options
) -> MixedPolicy:
    """``optimal``: the best plan (6 / 11 actions); ``suboptimal``: that plan with random detours
    and invalid utterances (see ``envs.overcooked.MixedPolicy``). Reads only the observation."""
    if task not in TASKS:
        raise ValueError(f"virtualhome: unknown task {task!r}; valid tasks: {list(TASKS)}")
    greedy = greedy_food if task == "food_preparation" else greedy_entertainment
    return MixedPolicy(greedy, seed=seed, mode=mode)


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` texts: whole scripted episodes of both tasks and every food-preparation variant (at
    least half of the texts), then action texts."""
    settings = [("entertainment", None)] + [("food_preparation", v) for v in VARIANTS]
    texts, actions = [], set()
    for k, (task, variant) in enumerate(settings):
        env = make(task, variant=variant) if variant else make(task)
        share = n // len(settings) + (k < n % len(settings))
        eps, acts = episode_texts(env, scripted_policy(seed=seed + k, task=task), share, seed + k)
        texts += eps
        actions |= set(acts) | set(env.task.texts)
    return mix_corpus(texts, actions, n)
