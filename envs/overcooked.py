"""Overcooked (TWOSOME / POAD): a cook makes a salad in a 7x7 kitchen, one macro-action per turn.

Rules (the reference: TWOSOME's gym-macro-overcooked, ``Overcooked-LLMA-v4`` for the tomato salad
and ``Overcooked-LLMA-v3`` for the tomato-lettuce salad, map A, one agent, view radius 2):
- The kitchen (x = row, y = column; ``#`` counter, ``K`` cutting board, ``D`` delivery counter,
  ``.`` floor, ``A`` the cook's start; t/l/o/b a tomato/lettuce/onion/bowl lying on a counter) is
  ``LAYOUTS[task]``.
- The cook sees the 5x5 square around itself: the observation only mentions what lies in it.
- Each turn the agent writes one of the available actions (TWOSOME's texts, which depend on the
  state: "pick up the tomato", "take the bowl", "walk to the cutting board", "put the tomato on the
  cutting board", "chop the tomato", "put the tomato in the bowl", "serve the dish", "serve
  nothing", ...). The action runs as a macro-action: primitive grid steps (a shortest path over the
  floor to the target, then one interaction with it) until it is done, exactly as the reference
  decides step by step.
- Rewards per primitive step: -0.001; +0.2 when a recipe ingredient becomes chopped (3 chops); +1
  and the episode ends when the right dish (a bowl holding exactly the recipe's chopped ingredients)
  is delivered; -0.1 for delivering anything else (the delivered things go back to where they
  started, unchopped). The reward of a turn is the sum over its primitive steps. At most 200
  primitive steps (then ``truncated``).
- Invalid action (no available action matches, see ``parse_action``): reward ``-invalid_penalty``
  (default 0.01), the state does not change, and it uses up one primitive step of the 200.

Observation: the reference's description of what the cook sees and holds, then the available
actions, then the reference's goal sentence (which ends where the agent's action continues the
text)::

    There is a fixed cutting board in the room. You notice a tomato on the table. Currently you
    don't have anything in hand.
    Available actions:
    - pick up the tomato
    - ...
    To serve the dish of a bowl only containing chopped tomato, you should first

Where we differ from the reference (deliberately): the reward of a macro-action is the plain sum of
its primitive rewards (the reference discounts them by 0.99 per primitive step inside a
macro-action; ``info["primitive_steps"]`` gives the duration for SMDP discounting); one bowl-content
wording for both tasks ("a bowl containing chopped tomato"); the 200-step cap is a truncation;
free-text actions with an invalid-action penalty (the reference only lets the agent pick from the
list). With one cook the reference's item-position memory always equals the truth, so we plan paths
on the true positions. The reference's rewards allow a loop (chop a tomato +0.2, serve it alone
-0.1, repeat) that we keep as is.
"""

from __future__ import annotations

import random
import re

from .core import normalize, reset_target

LAYOUTS = {  # one row per x; each string is a row of y = 0..6
    "tomato salad": """
        #####t#
        K...A.#
        #.....#
        D.....#
        #.....#
        #.....#
        #####b#""".split(),
    "tomato-lettuce salad": """
        #####t#
        K...A.l
        K.....o
        D.....#
        #.....#
        #.....#
        #####b#""".split(),
}
RECIPES = {"tomato salad": ("tomato",), "tomato-lettuce salad": ("tomato", "lettuce")}
TASKS = tuple(LAYOUTS)
MODES = ("suboptimal", "optimal")
ITEM_CODES = {"t": "tomato", "l": "lettuce", "o": "onion", "b": "bowl"}
FOODS = ("tomato", "lettuce", "onion")  # the reference's listing order
ARTICLE = {"tomato": "a tomato", "lettuce": "a lettuce", "onion": "an onion", "bowl": "a bowl"}
# up, down, left, right: also the tie order among equally short paths
DIRS = ((-1, 0), (1, 0), (0, -1), (0, 1))
CHOPS_NEEDED, VIEW_RADIUS = 3, 2
STEP_PENALTY, CHOP_REWARD, DISH_REWARD, WRONG_DELIVERY = 0.001, 0.2, 1.0, 0.1
# longer utterances are invalid without looking further (no action is nearly this long)
MAX_ACTION_CHARS = 200
_OPTIONS = {"task", "max_steps", "invalid_penalty"}


def _join(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c' (the reference's lists)."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _neighbours(cell):
    return [(cell[0] + dx, cell[1] + dy) for dx, dy in DIRS]


class Kitchen:
    """The static part of a layout: floor, boards, delivery, item origins, shortest paths."""

    def __init__(self, task: str):
        rows = LAYOUTS[task]
        self.floor, self.origin, self.boards = set(), {}, []
        for x, row in enumerate(rows):
            for y, ch in enumerate(row):
                if ch in ".A":
                    self.floor.add((x, y))
                if ch == "A":
                    self.start = (x, y)
                elif ch == "K":
                    self.boards.append((x, y))
                elif ch == "D":
                    self.delivery = (x, y)
                elif ch in ITEM_CODES:
                    self.origin[ITEM_CODES[ch]] = (x, y)
        self.foods = [f for f in FOODS if f in self.origin]
        self.front = [next(n for n in _neighbours(b) if n in self.floor) for b in self.boards]
        self._dist: dict = {}

    def distances(self, target):
        """Floor cell -> number of moves to reach a floor cell next to ``target`` (BFS, cached)."""
        if target not in self._dist:
            frontier = [n for n in _neighbours(target) if n in self.floor]
            dist = {c: 0 for c in frontier}
            while frontier:
                nxt = []
                for c in frontier:
                    for n in _neighbours(c):
                        if n in self.floor and n not in dist:
                            dist[n] = dist[c] + 1
                            nxt.append(n)
                frontier = nxt
            self._dist[target] = dist
        return self._dist[target]


class OvercookedEnv:
    """A Gymnasium-style env on strings (``reset`` / ``step(text)``); see the module docstring."""

    def __init__(
        self, task: str = "tomato salad", max_steps: int = 200, invalid_penalty: float = 0.01
    ):
        if task not in LAYOUTS:
            raise ValueError(f"overcooked: unknown task {task!r}; valid tasks: {list(TASKS)}")
        if max_steps < 1:
            raise ValueError(f"overcooked: max_steps must be >= 1, got {max_steps}")
        self.name, self.task, self.targets = "overcooked", task, [task]
        self.max_steps, self.invalid_penalty = max_steps, float(invalid_penalty)
        self.kitchen, self.recipe = Kitchen(task), RECIPES[task]
        self.rng = random.Random()
        self.done, self.obs, self.actions = True, "", []

    # --- state -----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode (the kitchen always starts the same; ``seed`` only seeds ``self.rng``).
        ``options={"target": task}`` is accepted for the evaluation contract (the task is the only
        target)."""
        if seed is not None:
            self.rng.seed(seed)
        reset_target(self.name, options, self.targets)  # validates: the task is the only target
        k = self.kitchen
        self.agent, self.held, self.bowl = k.start, None, []
        self.place = dict(k.origin)  # item -> the counter/board cell it lies on (not held/in bowl)
        self.chops = {f: 0 for f in k.foods}
        self.steps, self.turn, self.done, self.won = 0, 0, False, False
        self._render()
        return self.obs, self._info(invalid=False, primitive=0)

    def where(self, item: str):
        """Where an item is (held: where the cook is; in the bowl: where the bowl is)."""
        if item == self.held:
            return self.agent
        if item in self.bowl:
            return self.where("bowl")
        return self.place[item]

    def top(self, cell):
        """The item lying directly on a counter/board cell (food inside the bowl does not count)."""
        for item, c in self.place.items():
            if c == cell:
                return item
        return None

    def chopped(self, food: str) -> bool:
        return self.chops[food] >= CHOPS_NEEDED

    def visible(self, cell) -> bool:
        return max(abs(cell[0] - self.agent[0]), abs(cell[1] - self.agent[1])) <= VIEW_RADIUS

    # --- primitive steps --------------------------------------------------------------------------
    def _interact(self, cell) -> float:
        """The cook pushes into a counter/board/delivery ``cell`` (the reference's rules)."""
        top, h, k = self.top(cell), self.held, self.kitchen
        if cell == k.delivery:
            return self._deliver() if h else 0.0
        on_board = cell in k.boards
        if h is None:
            if top is None:
                return 0.0
            if on_board and top != "bowl" and not self.chopped(top):
                self.chops[top] += 1
                return CHOP_REWARD if self.chopped(top) and top in self.recipe else 0.0
            self.held = top  # pick up (from a table, or a bowl/chopped food from a board)
            del self.place[top]
        elif top is None:
            if on_board:  # put down on an empty board
                self.place[h] = cell
                self.held = None
        elif top == "bowl" and h != "bowl" and self.chopped(h):
            if on_board:  # the bowl on the board: pick it up with the food in it
                del self.place["bowl"]
                self.held = "bowl"
            else:
                self.held = None
            self.bowl.append(h)
        elif top != "bowl" and h == "bowl" and self.chopped(top):
            del self.place[top]
            self.bowl.append(top)
        return 0.0

    def _deliver(self) -> float:
        h = self.held
        if h == "bowl" and self.bowl and sorted(self.bowl) == sorted(self.recipe):
            self.held, self.won = None, True
            self.place["bowl"] = self.kitchen.delivery
            return DISH_REWARD
        back = [h] + (self.bowl if h == "bowl" else [])
        if h == "bowl":
            self.bowl = []
        self.held = None
        for item in back:  # wrong delivery: everything returns to its start, unchopped
            self.place[item] = self.kitchen.origin[item]
            if item in self.chops:
                self.chops[item] = 0
        return -WRONG_DELIVERY

    def _primitive(self, cell) -> float:
        """One primitive step: stay (None), move to a floor cell, or interact with another cell."""
        self.steps += 1
        reward = -STEP_PENALTY
        if cell is not None:
            if cell in self.kitchen.floor:
                self.agent = cell
            else:
                reward += self._interact(cell)
        return reward

    # --- macro-actions (the reference's step-by-step controller) ----------------------------------
    def _target(self, macro):
        kind, arg = macro
        if kind == "get":
            return self.where(arg)
        return self.kitchen.boards[arg] if kind == "board" else self.kitchen.delivery

    def _next_cell(self, target):
        """The next cell on a shortest path to ``target`` (itself when adjacent), or None."""
        dist = self.kitchen.distances(target)
        here = dist.get(self.agent)
        if here is None:
            return None
        if here == 0 and target in _neighbours(self.agent):
            return target
        return next((n for n in _neighbours(self.agent) if dist.get(n) == here - 1), None)

    def _low_level(self, macro):
        """The primitive step a macro-action takes now and whether the macro-action is then done."""
        kind, arg = macro
        if kind == "chop":
            for cell in _neighbours(self.agent):
                top = self.top(cell) if cell in self.kitchen.boards else None
                if top not in (None, "bowl") and not self.chopped(top):
                    self._chop_count += 1
                    return cell, self._chop_count >= CHOPS_NEEDED
            return None, True
        target = self._target(macro)
        food = kind == "get" and arg != "bowl"
        if food and self.visible(target) and arg in self.bowl:  # in the bowl: nothing to fetch
            return None, True
        if target == self.agent:  # it is in hand
            return None, True
        cell = self._next_cell(target)
        if cell is None:
            return None, True
        if cell != target:
            return cell, False
        h = self.held
        if kind == "get" and arg == "bowl" and h not in (None, "bowl"):
            # chopped food goes into the bowl first (then the bowl is lifted); unchopped food stays
            return (cell, False) if self.chopped(h) else (None, True)
        if kind == "board" and h is None:
            return None, True
        if (
            food
            and target in self.kitchen.boards
            and self.top(target) == arg
            and not self.chopped(arg)
        ):
            return None, True  # never pick up unchopped food from a board
        return cell, True

    def _finished_after_move(self, macro) -> bool:
        """The reference's end checks after a primitive step (empty-handed walks end next to it)."""
        kind, arg = macro
        adjacent = self._target(macro) in _neighbours(self.agent) if kind != "chop" else False
        if kind in ("board", "deliver"):
            return self.held is None and adjacent
        if kind == "get" and arg != "bowl":
            return adjacent and self.where(arg) in self.kitchen.boards and not self.chopped(arg)
        return False

    def _run(self, macro):
        reward, n, done = 0.0, 0, False
        self._chop_count = 0
        while not done and not self.won and self.steps < self.max_steps:
            cell, done = self._low_level(macro)
            reward += self._primitive(cell)
            n += 1
            done = done or self._finished_after_move(macro)
        return reward, n

    # --- text -------------------------------------------------------------------------------------
    def _board_name(self, c: int) -> str:
        if len(self.kitchen.boards) == 1:
            return "the cutting board"
        return f"the {('first', 'second')[c]} cutting board"

    def _thing(self, item: str) -> str:
        if item == "bowl":
            return "a bowl containing chopped " + _join(self._contents()) if self.bowl else "a bowl"
        return ("a chopped " if self.chopped(item) else "an unchopped ") + item

    def _contents(self) -> list[str]:
        return [f for f in self.kitchen.foods if f in self.bowl]

    def _macros(self):
        k = self.kitchen
        return (
            [("get", f) for f in k.foods]
            + [("get", "bowl")]
            + [("board", c) for c in range(len(k.boards))]
            + [("deliver", None), ("chop", None)]
        )

    def _render(self):
        """Build the observation and the available actions (TWOSOME's obs2text, our layout)."""
        self.actions = self._action_texts()
        dish = _join(list(self.recipe))
        goal = f"To serve the dish of a bowl only containing chopped {dish}, you should first"
        listing = "".join(f"- {a}\n" for a in self.actions)
        self.obs = " ".join(self._sentences()) + "\nAvailable actions:\n" + listing + goal

    def _front(self):
        """Index of the board the cook stands in front of, or None."""
        return self.kitchen.front.index(self.agent) if self.agent in self.kitchen.front else None

    def _sentences(self) -> list[str]:
        """What the cook sees (items on their tables, the boards in view) and holds."""
        k, h, front = self.kitchen, self.held, self._front()
        one = len(k.boards) == 1
        sents = [
            "There is a fixed cutting board in the room."
            if one
            else "There are two fixed cutting boards in the room."
        ]
        seen = [
            ARTICLE[i]
            for i in k.foods + ["bowl"]
            if self.place.get(i) == k.origin[i] and self.visible(k.origin[i])
        ]
        if seen:
            where = "the table" if len(seen) == 1 else "the different tables"
            sents.append(f"You notice {_join(seen)} on {where}.")
        for c, board in enumerate(k.boards):
            top = self.top(board)
            if top is not None and self.visible(board):
                thing = self._thing(top)
                sents.append(f"{thing[0].upper()}{thing[1:]} is on {self._board_name(c)}.")
        at = None if front is None else f"standing in front of {self._board_name(front)}"
        if h is None:
            sents.append(
                f"Currently you are {at} without anything in hand."
                if at
                else "Currently you don't have anything in hand."
            )
        elif h == "bowl" and self.bowl and not at:
            sents.append(f"Currently you are carrying {self._thing(h)}.")
        else:
            sents.append(
                f"Currently you are {at + ', carrying' if at else 'carrying'} "
                f"{self._thing(h)} in hand."
            )
        return sents

    def _action_texts(self) -> list[str]:
        """The available actions (one per entry of ``_macros``) in their state-dependent texts."""
        k, h, front = self.kitchen, self.held, self._front()
        nf, nb = len(k.foods), len(k.boards)
        acts = (
            [f"pick up the {f}" for f in k.foods]
            + ["take the bowl" if nb == 1 else "take the empty bowl"]
            + [f"walk to {self._board_name(c)}" for c in range(nb)]
            + ["serve nothing", "chop nothing"]
        )
        top = None if front is None else self.top(k.boards[front])
        if top not in (None, "bowl"):
            acts[-1] = f"chop the {top}"
        bowl_at = self.where("bowl")
        if nb > 1 and self.bowl and bowl_at in k.boards + [self.agent] and self.visible(bowl_at):
            acts[nf] = "take the bowl"
        if h is not None:
            acts[-2] = "serve the dish"
            if h == "bowl":
                acts[:nf] = [f"put the {f} in the bowl" for f in k.foods]
            if h == "bowl" or not self.chopped(h):
                for c in range(nb):
                    acts[nf + 1 + c] = f"put the {h} on {self._board_name(c)}"
        return acts

    # --- the contract -----------------------------------------------------------------------------
    def parse_action(self, action) -> int | None:
        """Index of the available action ``action`` names, or None (invalid). Exact match first;
        else the text is stripped, cut at its first newline and compared case-, punctuation- and
        whitespace-insensitively (``envs.core.normalize``). Texts over 200 characters are invalid.
        """
        return match_action(action, self.actions)

    def step(self, action: str):
        """Run one macro-action. Returns (obs, reward, terminated, truncated, info)."""
        if self.done:
            raise RuntimeError(
                f"{self.name}: step() called on a finished episode; call reset() first"
            )
        idx = self.parse_action(action)
        self.turn += 1
        if idx is None:
            self.steps += 1
            reward, n = -self.invalid_penalty, 1
        else:
            reward, n = self._run(self._macros()[idx])
        terminated = self.won
        truncated = not terminated and self.steps >= self.max_steps
        self.done = terminated or truncated
        self._render()
        return self.obs, reward, terminated, truncated, self._info(invalid=idx is None, primitive=n)

    def _info(self, invalid: bool, primitive: int) -> dict:
        return {
            "target": self.task,
            "won": self.won,
            "valid_actions": list(self.actions),
            "invalid": invalid,
            "turn": self.turn,
            "primitive_steps": primitive,
            "total_primitive_steps": self.steps,
        }


def match_action(action, actions: list[str]) -> int | None:
    """Shared action matcher (see ``OvercookedEnv.parse_action``)."""
    if not isinstance(action, str):
        return None
    if action in actions:
        return actions.index(action)
    text = action.strip().split("\n", 1)[0]
    if len(text) > MAX_ACTION_CHARS:
        return None
    key = normalize(text)
    for i, a in enumerate(actions):
        if normalize(a) == key:
            return i
    return None


def parse_actions(obs: str) -> list[str]:
    """The available actions listed in an observation (the lines starting with '- ')."""
    return [line[2:] for line in obs.split("\n") if line.startswith("- ")]


def make(task: str = "tomato salad", **options) -> OvercookedEnv:
    """Options: ``task`` ("tomato salad" or "tomato-lettuce salad"), ``max_steps`` (primitive steps,
    default 200), ``invalid_penalty`` (default 0.01)."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(
            f"overcooked: unknown option(s) {sorted(unknown)}; valid options: {sorted(_OPTIONS)}"
        )
    return OvercookedEnv(task=task, **options)


# --- scripted policies ----------------------------------------------------------------------------
_HELD = re.compile(
    r"carrying (a bowl containing chopped (?P<contents>[a-z ,]+?)|a bowl|a chopped (?P<ch>\w+)"
    r"|an unchopped (?P<un>\w+))( in hand)?\."
)
_ON_BOARD = re.compile(
    r"(?P<what>A bowl containing chopped [a-z ,]+?|A bowl|A chopped \w+|An unchopped \w+) "
    r"is on the (?:(?P<which>first|second) )?cutting board\."
)
_FRONT = re.compile(r"standing in front of the (?:(first|second) )?cutting board")
_GOAL = re.compile(r"only containing chopped ([a-z ,]+?), you should first")


def _words(listing: str) -> list[str]:
    return [w for w in re.split(r", | and ", listing) if w]


def read_state(obs: str) -> dict:
    """What an observation says: held item, board contents, the board the cook stands at, the items
    on tables, the recipe, the available actions."""
    m = _HELD.search(obs)
    held = None
    if m and (m.group("contents") is not None or m.group(1) == "a bowl"):
        held = ("bowl", tuple(_words(m.group("contents") or "")))
    elif m:
        held = (m.group("ch"), True) if m.group("ch") else (m.group("un"), False)
    boards = {}
    for b in _ON_BOARD.finditer(obs):
        what, c = b.group("what"), 1 if b.group("which") == "second" else 0
        if what.startswith("A bowl"):
            boards[c] = ("bowl", tuple(_words(what.partition("chopped ")[2])))
        else:
            boards[c] = (what.split()[-1], what.startswith("A chopped"))
    f = _FRONT.search(obs)
    tables = re.search(r"You notice (.+?) on the (?:different )?tables?\.", obs)
    g = _GOAL.search(obs)
    return {
        "held": held,
        "boards": boards,
        "front": None if f is None else int(f.group(1) == "second"),
        "tables": [w.split()[-1] for w in _words(tables.group(1))] if tables else [],
        "recipe": _words(g.group(1)) if g else ["tomato"],
        "actions": parse_actions(obs),
        "n_boards": 2 if "two fixed cutting boards" in obs else 1,
    }


def _board_text(n_boards: int, c: int) -> str:
    return "the cutting board" if n_boards == 1 else f"the {('first', 'second')[c]} cutting board"


def _take_bowl(s: dict) -> str:
    """The bowl action's current text ("take the bowl" or "take the empty bowl")."""
    return next((a for a in s["actions"] if a.startswith("take the")), "take the bowl")


def _with_bowl(s: dict) -> str:
    """Holding the bowl: serve it when complete, else collect a chopped ingredient; an empty bowl
    that blocks the work is handed back (-0.1), a partly filled one is parked on a free board."""
    boards, nb = s["boards"], s["n_boards"]
    missing = [f for f in s["recipe"] if f not in s["held"][1]]
    if not missing:
        return "serve the dish"
    ready = [f for f in missing if (f, True) in boards.values()]
    if ready:
        return f"put the {ready[0]} in the bowl"
    unchopped = [f for f in missing if f in s["tables"] or (f, False) in boards.values()]
    free = [c for c in range(nb) if c not in boards]
    if unchopped and not s["held"][1]:
        return "serve the dish"
    if unchopped and free:
        return f"put the bowl on {_board_text(nb, free[0])}"
    return f"put the {missing[0]} in the bowl"


def _with_food(s: dict) -> str:
    """Holding food: hand back a distractor; bring chopped food to the bowl; put unchopped food on
    its board (tomato: the first, lettuce: the second)."""
    food, is_chopped = s["held"]
    boards, nb = s["boards"], s["n_boards"]
    if food not in s["recipe"]:
        return "serve the dish"
    if is_chopped:
        bowl_on = [c for c, v in boards.items() if v[0] == "bowl"]
        return f"walk to {_board_text(nb, bowl_on[0])}" if bowl_on else _take_bowl(s)
    home = min(s["recipe"].index(food), nb - 1)
    free = [c for c in range(nb) if c not in boards]
    target = home if home not in boards else (free[0] if free else None)
    return "serve the dish" if target is None else f"put the {food} on {_board_text(nb, target)}"


def _empty_handed(s: dict) -> str:
    """Hands empty: chop what lies unchopped on a board, lift a bowl from a board, fetch the next
    ingredient; all chopped: take the single ingredient (the 28-step tomato salad) or the bowl."""
    boards, nb, recipe = s["boards"], s["n_boards"], s["recipe"]
    for c, (item, is_chopped) in boards.items():
        if item in recipe and not is_chopped:
            return f"chop the {item}" if s["front"] == c else f"walk to {_board_text(nb, c)}"
    if any(v[0] == "bowl" for v in boards.values()):
        return _take_bowl(s)
    done = [v[0] for v in boards.values() if v[0] in recipe and v[1]]
    todo = [f for f in recipe if f not in done]
    if todo:
        return f"pick up the {todo[0]}"
    return f"pick up the {done[0]}" if len(done) == 1 else _take_bowl(s)


def greedy_action(obs: str) -> str:
    """A good action read off the observation alone (optimal from the start of both tasks: 28 and 45
    primitive steps, the optima of an exhaustive search)."""
    s = read_state(obs)
    if s["held"] is None:
        return _empty_handed(s)
    return _with_bowl(s) if s["held"][0] == "bowl" else _with_food(s)


class MixedPolicy:
    """``optimal``: the greedy action always. ``suboptimal`` (the data policy): with probability
    ``p_random`` a uniformly random available action, with probability ``p_invalid`` an invalid
    utterance (a shouted, reversed or made-up action, or nothing), else the greedy action. Reads
    only the observation; shared by the Overcooked and VirtualHome envs."""

    def __init__(
        self,
        greedy,
        seed: int = 0,
        mode: str = "suboptimal",
        p_random: float = 0.5,
        p_invalid: float = 0.05,
    ):
        if mode not in MODES:
            raise ValueError(f"scripted policy: mode must be one of {MODES}, got {mode!r}")
        self.greedy, self.mode, self.p_random, self.p_invalid = greedy, mode, p_random, p_invalid
        self.rng = random.Random(seed)

    def __call__(self, obs: str) -> str:
        best = self.greedy(obs)
        if self.mode == "optimal":
            return best
        u = self.rng.random()
        if u < self.p_invalid:
            return self.rng.choice(
                [best.upper() + " now", "chop the bowl", "walk to the fridge", best[::-1], ""]
            )
        if u < self.p_invalid + self.p_random:
            return self.rng.choice(parse_actions(obs) or [best])
        return best


def scripted_policy(
    seed: int = 0, mode: str = "suboptimal", task: str = "tomato salad", **options
) -> MixedPolicy:
    """The scripted cook (reads only the observation, so one policy serves both tasks)."""
    return MixedPolicy(greedy_action, seed=seed, mode=mode)


def episode_texts(env, policy, n: int, seed: int) -> tuple[list[str], set[str]]:
    """``n`` whole episodes of ``policy`` in ``env`` as texts (one "observation action" entry per
    turn) and the set of action texts the observations listed."""
    episodes, actions = [], set()
    for i in range(n):
        obs, _ = env.reset(seed=seed * 100_003 + i)
        lines, done = [], False
        while not done:
            act = policy(obs)
            actions.update(parse_actions(obs))
            lines.append(f"{obs} {act}")
            obs, _, term, trunc, _ = env.step(act)
            done = term or trunc
        episodes.append("\n".join(lines))
    return episodes, actions


def mix_corpus(episodes: list[str], actions: set[str], n: int) -> list[str]:
    """``n`` texts: the action texts (at most half of them), the rest whole episodes."""
    acts = sorted(actions)[: n // 2]
    return episodes[: n - len(acts)] + acts


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` texts: whole scripted episodes of both tasks (at least half of the texts), then the
    action texts seen."""
    texts, actions = [], set()
    for k, task in enumerate(TASKS):
        eps, acts = episode_texts(
            make(task), scripted_policy(seed=seed + k), (n + 1 - k) // 2, seed + k
        )
        texts += eps
        actions |= acts
    return mix_corpus(texts, actions, n)
