"""Interactive fiction on the Jericho engine: any Z-machine game, and ArCHer's Detective Game.

The ArCHer paper's Detective Game (App. A) is an Inform Z-machine game played through Jericho
(Hausknecht et al.), the usual Python interface to text adventures: free-form commands parsed by the
game, reward = the game's score increments (milestones, 360 in all), an optimal walkthrough of 51
commands, at most 60 commands per episode. Two registered envs:

    envs.make("detective", rom_path="detective.z5")  # the paper's settings (max_steps 60)
    envs.make("jericho", rom_path="zork1.z5")        # any Z-machine game (max_steps 50)
    envs.make("jericho")                             # our own four-room test game (no download)

The scripts pass the ROM through the environment variable ``TURNRL_ROM`` (``rom_path`` wins when
both are given): ``TURNRL_ROM=~/if/detective.z5 python filtered_bc.py --env detective``. Without
either, ``jericho`` plays the bundled test game ``envs/jericho_games/gullpoint.z5`` (source and
compile command beside it) and ``detective`` fails. Needs the optional extra ``pip install -r
requirements-jericho.txt`` (the ``jericho`` package, which compiles frotz with gcc); the ROM
detective.z5 is a free download from the IF Archive (``DETECTIVE_URL``). A missing engine or ROM
fails at ``make`` with one message naming both fixes.

Episode: ``reset`` restarts the game (the emulator's random seed is fixed: Jericho's walkthrough
seed for the games it knows, else 1, so every episode is the same game; ``reset(seed)`` seeds only
``self.rng``). ``step(command)`` sends the first line of the utterance (printable ASCII without
backslashes, at most 120 characters) to the game; every command counts as one of the ``max_steps``
steps, whether the game understood it or not. Reward: the change of the game's score. ``terminated``
when the game ends (won or lost), ``truncated`` at the step limit. Observation: the dialogue so far,
the game's text followed by one ``"> command"`` line and the game's reply per step::

    Shingle Beach
    Grey shingle runs along the foot of the cliffs. ...
    > north
    Keeper's Cottage
    ...

``info``: ``target`` (the game's name), ``won``, ``score``, ``moves`` (the game's move counter),
``max_score`` (None when unknown), ``turn`` (steps taken), ``illegal`` (the game's move counter did
not advance and the game did not end: a parser error such as "That's not a verb I recognise." or
"You can't see any such thing.", an empty command, or a disabled meta command), ``valid_actions``
(None unless ``valid_actions=True``).

Score, moves and the end of the game: from Jericho's per-game bindings for the 57 games it supports
(detective.z5 among them); for other games from the status line the game prints ("Score: 10
Moves: 3", as Inform games do) and the "*** You have won ***" / "*** You have died ***"
banners of the Inform library. A game without a score on its status line gives reward 0 throughout.

Where we differ from the paper's environment: the game's own reply to a command it cannot parse is
kept (it tells the agent what went wrong) instead of a fixed illegal-action message; meta commands
that would leave the game (save, restore, restart, undo, quit, script, ...) are not sent to it: they
get a fixed reply and cost a step; the valid-action list is opt-in (``valid_actions=True``: Jericho
tries candidate commands on copies of the game, which costs far more than a step, needs spaCy's
``en_core_web_sm`` model, and works only for the games Jericho supports).

Scripted policies (read only the observation): ``expert`` plays the walkthrough (Jericho's for the
games it supports, ours for the test game); ``suboptimal`` (the data policy) plays the walkthrough
but with probability ``p_noise`` sends a random command from the game's vocabulary (a compass
direction, look / inventory / wait, or a walkthrough command out of place) and with probability
``p_invalid`` a command the parser rejects. It tracks its place in the walkthrough from the
commands in the observation, so a detour can leave it in the wrong room: later walkthrough commands
then fail, as a careless player's would.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import random
import re
import warnings
from pathlib import Path

from .core import check_action, reset_target

MODES = ("suboptimal", "expert")  # scripted policies: the data policy first
ROM_ENV = "TURNRL_ROM"  # the environment variable the scripts' ROM path comes from
TEST_ROM = Path(__file__).parent / "jericho_games" / "gullpoint.z5"
TEST_SOLUTION = (  # 9 commands, 50 points (see gullpoint.inf)
    "north/take key/take matches/south/east/unlock door with key/open door/up/"
    "light lamp with matches"
).split("/")
TEST_MAX_SCORE = 50
DETECTIVE_URL = "https://ifarchive.org/if-archive/games/zcode/detective.z5"
DETECTIVE_MD5 = "822655c9be83e292e06d3d3b1d6a9734"  # the release Jericho supports
JERICHO_INSTALL = (
    "pip install -r requirements-jericho.txt (jericho==3.3.1; compiles frotz with gcc)"
)
GAMES = {None: 50, "detective": 60}  # game -> default max_steps
MAX_COMMAND_CHARS = 120
# Meta commands that leave or rewind the game (Inform and Infocom verbs): never sent to the engine.
META = {
    "quit", "q", "die", "restart", "restore", "save", "undo", "script", "transcript",
    "unscript", "noscript", "recording", "replay",
}  # fmt: skip
META_REPLY = "[Meta commands (save, restore, restart, undo, quit, script) are disabled here.]"
NOISE_COMMANDS = (
    "north", "south", "east", "west", "up", "down", "northeast", "northwest", "southeast",
    "southwest", "look", "inventory", "wait",
)  # fmt: skip
INVALID_COMMANDS = ("xyzzy frobnicate", "the the", "go to the", "take", "please help me", "")
_OPTIONS = {"rom_path", "game", "max_steps", "max_turns", "valid_actions"}
_STATUS = re.compile(r"\n>[^\n]*\Z")  # the prompt (and, for unsupported games, the status line)
_BLANKS = re.compile(r"\n{3,}")
_BANNER = re.compile(r"\*{3,4}\s*([^*\n]+?)\s*\*{3,4}")  # "*** You have won ***"


class JerichoSetupError(RuntimeError):
    """The Jericho engine or the game file is missing (the message says where to get each)."""


def resolve_rom(rom_path=None, game: str | None = None) -> Path | None:
    """The ROM to play: ``rom_path``, else ``$TURNRL_ROM``, else (not for the detective game) the
    bundled test game. None when the detective game has neither."""
    path = rom_path or os.environ.get(ROM_ENV) or None
    if path is None:
        return None if game == "detective" else TEST_ROM
    return Path(path).expanduser()


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _setup_problems(rom: Path | None, game: str | None) -> list[str]:
    problems = []
    if not _has_module("jericho"):
        problems.append(f"the Jericho engine is not installed: {JERICHO_INSTALL}")
    if rom is None or not rom.is_file():
        what = f"no game file at {str(rom)!r}" if rom is not None else "no game file given"
        where = (
            f"detective.z5 is a free download from the IF Archive: {DETECTIVE_URL}"
            if game == "detective"
            else "any Z-machine game file (.z3/.z5/.z8) works"
        )
        problems.append(
            f"{what}: pass rom_path=PATH to envs.make or set {ROM_ENV}=PATH for the scripts; "
            + where
        )
    return problems


@functools.lru_cache(maxsize=32)
def _md5(path: str) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def _bindings(rom: Path) -> dict:
    """Jericho's per-game bindings (walkthrough, seed, ...) for this exact file; {} if unknown."""
    from jericho import defines

    return dict(defines.BINDINGS_DICT.get(_md5(str(rom)), {}))


def walkthrough(rom: Path) -> list[str]:
    """The known winning command sequence for ``rom``: ours for the test game, else Jericho's."""
    if _md5(str(rom)) == _md5(str(TEST_ROM)):
        return list(TEST_SOLUTION)
    commands = _bindings(rom).get("walkthrough", "")
    if not commands:
        raise ValueError(
            f"jericho: no walkthrough is known for {rom} (Jericho ships walkthroughs only for the "
            "games it supports), so there is no scripted policy for it"
        )
    return commands.split("/")


def clean_command(action: str) -> str:
    """What is sent to the game: the first line, printable ASCII only, at most 120 characters, no
    backslash (Jericho's frotz reads a backslash as an interpreter escape: ``\\X`` quits, ``\\U``
    undoes, and a line starting with one and a lower-case letter makes it loop forever)."""
    first = action.split("\n", 1)[0]
    return "".join(c for c in first if " " <= c <= "~" and c != "\\")[:MAX_COMMAND_CHARS].strip()


def is_meta(command: str) -> bool:
    """True when some sub-command (split at '.', ';' and 'then') starts with a meta verb."""
    for part in re.split(r"[.;]|\bthen\b", command.lower()):
        words = re.findall(r"[a-z]+", part)
        if words and words[0] in META:
            return True
    return False


def parse_commands(obs: str) -> list[str]:
    """The commands of an observation, in order (its ``"> command"`` lines)."""
    return [line[2:] for line in obs.split("\n") if line.startswith("> ")]


class JerichoEnv:
    """A Gymnasium-style env on strings (``reset`` / ``step(text)``); see the module docstring."""

    def __init__(
        self,
        rom_path=None,
        game: str | None = None,
        max_steps: int | None = None,
        valid_actions: bool = False,
    ):
        if game not in GAMES:
            raise ValueError(f"jericho: unknown game {game!r}; valid: {list(GAMES)}")
        rom = resolve_rom(rom_path, game)
        problems = _setup_problems(rom, game)
        if problems:
            raise JerichoSetupError(
                f"cannot start env {game or 'jericho'!r}: " + "; and ".join(problems)
            )
        if game == "detective" and _md5(str(rom)) != DETECTIVE_MD5:
            raise ValueError(
                f"detective: {rom} is not the detective.z5 that Jericho supports (md5 "
                f"{_md5(str(rom))}, expected {DETECTIVE_MD5}); its score would be read from the "
                f"wrong memory: get it from {DETECTIVE_URL}"
            )
        self.max_steps = GAMES[game] if max_steps is None else int(max_steps)
        if self.max_steps < 1:
            raise ValueError(f"jericho: max_steps must be >= 1, got {max_steps}")
        import jericho

        self.rom = rom
        with warnings.catch_warnings():  # unsupported games warn; we read their status line
            warnings.simplefilter("ignore", jericho.UnsupportedGameWarning)
            self.game = jericho.FrotzEnv(str(rom))
        self.supported = bool(self.game.is_fully_supported and self.game.bindings)
        if not self.game.bindings:
            self.game.seed(1)  # Jericho's default for unknown games is a time-based seed
        self.want_valid = bool(valid_actions)
        if self.want_valid and not self.supported:
            raise ValueError(
                f"jericho: valid_actions=True needs a game Jericho supports; {rom.name} is not one"
            )
        if self.want_valid and not _has_module("en_core_web_sm"):
            raise JerichoSetupError(
                "jericho: valid_actions=True needs spaCy's en_core_web_sm model (Jericho would "
                "download it at run time): python -m spacy download en_core_web_sm"
            )
        is_test = _md5(str(rom)) == _md5(str(TEST_ROM))
        name = "detective" if game == "detective" else self.game.bindings.get("name")
        name = "gullpoint" if is_test else name
        self.name, self.targets = game or "jericho", [name or rom.stem]
        if self.supported:
            self.max_score = self.game.get_max_score() or None
        else:
            self.max_score = TEST_MAX_SCORE if is_test else None
        self.rng = random.Random()
        self.done, self.obs, self.turn = True, "", 0

    # --- engine access: Jericho's bindings where it supports the game, else the status line ---
    def _read(self, text: str) -> tuple[str, int, int]:
        """(text without prompt / status line, score, moves) after the last engine call."""
        m = _STATUS.search(text)
        tail = m.group(0) if m else ""
        text = text[: m.start()] if m else text
        text = _BLANKS.sub("\n\n", re.sub(r"[ \t]+\n", "\n", text))  # at most one blank line
        if self.supported:
            return text, int(self.game.get_score()), int(self.game.get_moves())
        score = re.search(r"Score:\s*(-?\d+)", tail)
        moves = re.search(r"(?:Moves|Turns):\s*(\d+)", tail)
        return (
            text,
            int(score.group(1)) if score else self.score,
            int(moves.group(1)) if moves else self.moves,
        )

    def _ended(self, text: str) -> tuple[bool, bool]:
        """(game over, won) after the last engine call."""
        if self.supported:
            won = self.game.victory()
            return won or self.game.game_over(), won
        banner = _BANNER.search(text)
        won = bool(banner) and "won" in banner.group(1).lower()
        return bool(banner) or self.game._emulator_halted(), won

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Restart the game. ``options={"target": name}`` is accepted for the evaluation contract
        (the only target is the game's name)."""
        if self.game is None:
            raise RuntimeError(f"{self.name}: reset() called after close()")
        if seed is not None:
            self.rng.seed(seed)
        reset_target(self.name, options, self.targets)
        self.score, self.moves = 0, 0
        text, _ = self.game.reset()
        text, self.score, self.moves = self._read(text)
        self.turn, self.done, self.won, self.illegal = 0, False, False, False
        self.obs = text.strip() + "\n"
        return self.obs, self._info()

    def step(self, action: str):
        """Send one command. Returns (obs, reward, terminated, truncated, info)."""
        check_action(self.name, action)
        if self.game is None:
            raise RuntimeError(f"{self.name}: step() called after close()")
        if self.done:
            raise RuntimeError(
                f"{self.name}: step() called on a finished episode; call reset() first"
            )
        command = clean_command(action)
        self.turn += 1
        old_score, old_moves = self.score, self.moves
        ended, self.won = False, False
        if is_meta(command):
            reply = META_REPLY
        else:
            text, _, _, _ = self.game.step(command)
            reply, self.score, self.moves = self._read(text)
            ended, self.won = self._ended(reply)
        self.illegal = self.moves == old_moves and not ended
        truncated = not ended and self.turn >= self.max_steps
        self.done = ended or truncated
        self.obs += f"> {command}\n{reply.strip()}\n"
        return self.obs, float(self.score - old_score), ended, truncated, self._info()

    def _info(self) -> dict:
        valid = None
        if self.want_valid and not self.done:
            valid = self.game.get_valid_actions(use_parallel=False)
        return {
            "target": self.targets[0],
            "won": self.won,
            "score": self.score,
            "moves": self.moves,
            "max_score": self.max_score,
            "turn": self.turn,
            "illegal": self.illegal,
            "valid_actions": valid,
        }

    def close(self):
        """Release the engine (its copy of the frotz library and the game's memory); the env
        cannot be used afterwards."""
        if self.game is not None:
            self.game.close()
            self.game, self.done = None, True


def make(game: str | None = None, **options) -> JerichoEnv:
    """Options: ``rom_path`` (default ``$TURNRL_ROM``, else the bundled test game; required for
    the detective game), ``max_steps`` (default 60 for the detective game, else 50; the scripts'
    ``--max-turns`` arrives as ``max_turns``, the same thing), ``valid_actions`` (default False)."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(
            f"jericho: unknown option(s) {sorted(unknown)}; valid options: {sorted(_OPTIONS)}"
        )
    max_steps, max_turns = options.pop("max_steps", None), options.pop("max_turns", None)
    if None not in (max_steps, max_turns) and max_steps != max_turns:
        raise ValueError(f"jericho: max_steps={max_steps} and max_turns={max_turns} disagree")
    return JerichoEnv(game=game, max_steps=max_turns if max_steps is None else max_steps, **options)


class WalkthroughPolicy:
    """``expert``: the next walkthrough command. ``suboptimal``: that, or with probability
    ``p_noise`` a random command of the game's vocabulary, with probability ``p_invalid`` a command
    the parser rejects. The place in the walkthrough is read off the observation: the number of
    walkthrough commands sent in order so far."""

    def __init__(self, commands, seed=0, mode="suboptimal", p_noise=0.15, p_invalid=0.05):
        if mode not in MODES:
            raise ValueError(f"scripted policy: mode must be one of {MODES}, got {mode!r}")
        self.commands, self.mode = list(commands), mode
        self.p_noise, self.p_invalid = p_noise, p_invalid
        self.vocabulary = sorted(set(NOISE_COMMANDS) | {c.lower() for c in self.commands})
        self.rng = random.Random(seed)

    def position(self, obs: str) -> int:
        k = 0
        for command in parse_commands(obs):
            if k < len(self.commands) and command.lower() == self.commands[k].lower():
                k += 1
        return k

    def __call__(self, obs: str) -> str:
        k = self.position(obs)
        best = self.commands[k] if k < len(self.commands) else None
        if self.mode == "expert":
            return best or "look"
        u = self.rng.random()
        if u < self.p_invalid:
            return self.rng.choice(INVALID_COMMANDS)
        if best is None or u < self.p_invalid + self.p_noise:
            return self.rng.choice(self.vocabulary)
        return best


def scripted_policy(
    seed: int = 0, mode: str = "suboptimal", game: str | None = None, rom_path=None, **options
) -> WalkthroughPolicy:
    """The walkthrough player (see ``WalkthroughPolicy``) for the ROM ``make`` would open."""
    rom = resolve_rom(rom_path, game)
    problems = _setup_problems(rom, game)
    if problems:
        raise JerichoSetupError(
            f"no scripted policy for {game or 'jericho'!r}: " + "; and ".join(problems)
        )
    return WalkthroughPolicy(walkthrough(rom), seed=seed, mode=mode)


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` texts for the tiny tokenizer: whole scripted episodes (up to 50 distinct ones, cycled)
    of the ROM ``make`` opens by default (``$TURNRL_ROM`` or the test game), then the walkthrough's
    and the noise vocabulary's commands. For a game without a known walkthrough the episodes are
    random generic commands (directions, look, inventory, wait)."""
    rom = resolve_rom()
    game = "detective" if rom.is_file() and _md5(str(rom)) == DETECTIVE_MD5 else None
    env = JerichoEnv(rom_path=rom, game=game)
    try:
        policy = scripted_policy(seed=seed, rom_path=rom, game=game)
    except ValueError:  # no known walkthrough: explore with the generic commands
        policy = WalkthroughPolicy([], seed=seed)
    commands = sorted(set(policy.vocabulary) | set(policy.commands))[: n // 2]
    episodes = []
    for i in range(min(max(n - len(commands), 1), 50)):
        obs, _ = env.reset(seed=seed * 100_003 + i)
        done = False
        while not done:
            obs, _, term, trunc, _ = env.step(policy(obs))
            done = term or trunc
        episodes.append(obs)
    env.close()
    fill = max(n - len(commands), 0)
    return ([episodes[i % len(episodes)] for i in range(fill)] + commands)[:n]
