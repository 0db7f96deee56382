"""Chess and chess endgames as text games (LMRL-Gym's Chess and Endgames; Q-SFT's Chess).

The agent plays White against an opponent. Registered as two envs:

- ``chess``: full games from the standard start position against Stockfish (the reference).
- ``chess_endgame``: random legal positions from a piece string such as ``"kQK"`` (black king;
  white queen and king) or ``"kRK"``, White to move and not in check; a short-horizon task.

Text (the reference format):
- observation = the current position's FEN with every character separated by one space (a space
  in the FEN becomes three). It is the whole text the agent conditions on: no move history, as in
  the reference (the FEN is the state, up to repetition counts and the illegal-move streak);
- action = one move in SAN, characters separated by spaces (``"N f 3"``), also accepted without
  spaces. Only the first line counts; all whitespace is removed and the rest is parsed with
  python-chess's SAN parser (standard SAN; it also takes over-disambiguated moves such as
  ``e2e4`` and tolerates a missing ``x`` or ``+``).

Rewards (per agent move): +1 for the move that mates; -1 for an illegal or unparsable move (the
position is unchanged and the game goes on); -1 when the opponent mates the agent; 0 for every
other move and for draws (stalemate, insufficient material, 75-move rule, fivefold repetition:
python-chess's automatic endings, as in the reference). Episode ends:
- checkmate or an automatic draw: ``terminated``;
- ``max_illegal`` (5) illegal moves in a row: ``terminated`` (our addition: the reference has no
  cap, so a model that never writes a legal move loops to the move cap); a legal move resets the
  streak, and each illegal move of it costs -1;
- ``max_moves`` agent steps (legal or not, counted as the reference counts them): ``truncated``
  (the step count is not in the observation). Defaults: 400 for ``chess`` (the reference), 50 for
  ``chess_endgame``.

Deliberate differences from the reference: a null move (``--``, ``0000``) is an illegal move like
any other (the reference ended the episode with -1); the illegal-move cap; the endgame move cap;
the engine searches a fixed number of nodes instead of 100 ms (results do not depend on the
machine's speed).

Opponents (``opponent=``): ``"stockfish"`` (default for ``chess``) plays through python-chess's UCI
API with the reference settings: ``UCI_LimitStrength`` on, ``UCI_Elo`` 1200, ``Threads`` 1.
Stockfish 15.1 (Debian's package, the paper's version) accepts UCI_Elo 1350..2850 and ignores 1200,
so the reference in fact played at 1350; we clamp into the engine's range and report the value as
``env.engine_elo``. At that strength Stockfish picks its move from a depth-1 search (among its four
best), so the default node budget is small (2,000). Its strength limiter draws the weakening from a
clock-seeded generator, so Elo-limited games are not bit-reproducible; ``elo=None`` plays at full
strength and is deterministic for a fixed node budget. ``"random"`` (a uniform legal move) and
``"greedy"`` (captures the most valuable piece, else random) are pure Python, seeded by
``reset(seed=...)``; ``chess_endgame`` defaults to ``"greedy"`` so it runs anywhere
(``opponent="stockfish"`` gives the reference's endgames).

Targets: a target is a starting position (FEN). ``chess``: ``targets == [standard start]`` (the
reference evaluates full games from the start). ``chess_endgame``: ``n_targets`` (100) fixed
positions drawn with a seed derived from the piece string; ``reset()`` without a target draws a
fresh random position that is never one of them (training positions stay apart from evaluation
positions, like LMRL-Gym's held-out test positions). ``reset(options={"fen": FEN})`` starts from
any legal position with White to move. ``info["target"]`` is the starting FEN.

The Stockfish process starts on the first engine move and lives as long as the env; it is closed
by ``env.close()``, when the env is garbage-collected and at interpreter exit, and restarted once
if it dies (a second failure in a row raises RuntimeError). Install: ``apt-get install stockfish``
(Debian/Ubuntu; the binary goes to /usr/games) or pass ``stockfish_path=``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import threading
import time
import weakref

try:
    import chess
    import chess.engine
except ImportError as e:  # imported when a chess env is first made (envs/__init__.py)
    raise ImportError(
        f"the chess envs (chess, chess_endgame) need python-chess: pip install chess ({e})"
    ) from e

INSTALL_HINT = (
    "install it with `sudo apt-get install stockfish` (Debian/Ubuntu; the binary goes "
    "to /usr/games/stockfish) or pass stockfish_path='/path/to/stockfish'; or use a "
    "built-in opponent: opponent='random' or opponent='greedy'"
)
SEARCH_DIRS = ["/usr/games", "/usr/local/games", "/usr/local/bin", "/opt/homebrew/bin"]
PIECE_VALUES = {
    chess.PAWN: 1,
    chess.KNIGHT: 3,
    chess.BISHOP: 3,
    chess.ROOK: 5,
    chess.QUEEN: 9,
    chess.KING: 0,
}
OPPONENTS = ("stockfish", "random", "greedy")
MODES = (
    "suboptimal",
    "random",
    "greedy",
    "heuristic",
    "stockfish_1350",
    "stockfish_1800",
    "stockfish_2400",
    "stockfish",
)
DEFAULT_NODES = 2_000  # the opponent's node budget (an Elo-1350 Stockfish decides at depth 1)
POLICY_NODES = 20_000  # the Stockfish agents' node budget (they search deeper)
_MAX_ACTION_CHARS = 16  # the longest SAN (disambiguated, promotion, check mark) has 8 characters


# ----------------------------------------------------------------------------------- text format


def spaced(text: str) -> str:
    """The reference's text format: every character separated by one space."""
    return " ".join(text)


def fen_from_obs(obs: str) -> str:
    """The FEN inside an observation (the inverse of ``spaced``); a plain FEN passes through."""
    if len(obs) > 1 and set(obs[1::2]) == {" "}:
        return obs[::2]
    return obs.strip()


def parse_move(board: chess.Board, action) -> chess.Move | None:
    """The legal move ``action`` names in ``board`` (its first line, whitespace removed, read as
    SAN), or None."""
    if not isinstance(action, str):
        return None
    text = "".join(action.strip().split("\n", 1)[0].split())
    if not text or len(text) > _MAX_ACTION_CHARS:
        return None
    try:
        move = board.parse_san(text)
    except ValueError:
        return None
    return None if move == chess.Move.null() else move


# -------------------------------------------------------------------------------- the engine


def find_stockfish(path: str | None = None) -> str | None:
    """The Stockfish binary: ``path`` if given (a file, or a program name looked up like below;
    None when it is not executable), else ``stockfish`` on PATH or in the usual system folders
    (Debian puts it in /usr/games)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *SEARCH_DIRS])
    if path is not None and os.sep in path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(path or "stockfish", path=search)


def require_stockfish(path: str | None = None) -> str:
    """``find_stockfish`` or a FileNotFoundError that says how to install it."""
    found = find_stockfish(path)
    if found is None:
        where = f"at stockfish_path={path!r}" if path is not None else "on PATH or in /usr/games"
        raise FileNotFoundError(f"no Stockfish binary {where}: {INSTALL_HINT}")
    return found


_LIVE_ENGINES: weakref.WeakSet = weakref.WeakSet()
_EXIT_HOOK = []


def _close_live_engines() -> None:
    for engine in list(_LIVE_ENGINES):
        engine.close()


def _register_exit_hook() -> None:
    """Close every engine at exit. python-chess runs each engine in a non-daemon thread, which the
    interpreter joins *before* ``atexit`` handlers run, so an unclosed engine would hang the exit;
    ``threading._register_atexit`` runs before that join (concurrent.futures relies on it too)."""
    if _EXIT_HOOK:
        return
    _EXIT_HOOK.append(True)
    hook = getattr(threading, "_register_atexit", None)
    try:
        (hook or atexit.register)(_close_live_engines)
    except RuntimeError:  # interpreter already shutting down
        atexit.register(_close_live_engines)


class Engine:
    """One Stockfish process behind python-chess's UCI API: started on first use, ``Threads`` 1,
    ``UCI_LimitStrength`` at ``elo`` (clamped into the engine's range; None = full strength), a
    fixed node budget per move. A failed request restarts the process and retries once."""

    def __init__(self, path: str, elo: int | None = 1200, nodes: int = DEFAULT_NODES):
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.path, self.elo, self.nodes = path, elo, nodes
        self.effective_elo: int | None = None
        self._engine: chess.engine.SimpleEngine | None = None
        self.failures = 0  # failed requests (each one closes the process; the next starts anew)
        self.seconds, self.calls = 0.0, 0  # time spent in engine requests, for the benchmark

    @property
    def pid(self) -> int | None:
        """The process id while the engine runs, else None."""
        return None if self._engine is None else self._engine.transport.get_pid()

    def _start(self) -> None:
        _register_exit_hook()
        engine = chess.engine.SimpleEngine.popen_uci([self.path])
        self._engine = engine
        _LIVE_ENGINES.add(self)
        options = {"Threads": 1}
        if self.elo is None:
            options["UCI_LimitStrength"] = False
        elif "UCI_Elo" not in engine.options:
            self.close()
            raise ValueError(f"{self.path} has no UCI_Elo option; pass elo=None (full strength)")
        else:
            low, high = engine.options["UCI_Elo"].min, engine.options["UCI_Elo"].max
            self.effective_elo = max(low, min(high, int(self.elo)))
            options.update({"UCI_LimitStrength": True, "UCI_Elo": self.effective_elo})
        engine.configure(options)

    def play(self, board: chess.Board, game=None) -> tuple[chess.Move, int | None]:
        """The engine's move in ``board`` and its score in centipawns from White's side (mates as
        +-100000; None when not reported). A new ``game`` value tells the engine a game starts."""
        last = None
        for _ in range(2):
            try:
                if self._engine is None:
                    self._start()
                start = time.perf_counter()
                result = self._engine.play(
                    board,
                    chess.engine.Limit(nodes=self.nodes),
                    game=game,
                    info=chess.engine.INFO_SCORE,
                )
                self.seconds += time.perf_counter() - start
                self.calls += 1
                if result.move is None or not board.is_legal(result.move):
                    raise chess.engine.EngineError(f"no legal move from the engine: {result.move}")
                score = result.info.get("score")
                cp = None if score is None else score.white().score(mate_score=100_000)
                return result.move, cp
            except (chess.engine.EngineError, OSError, TimeoutError) as err:
                last = err
                self.close()
                self.failures += 1
        raise RuntimeError(
            f"Stockfish ({self.path}) failed twice in a row (restarted once): "
            f"{last!r}. Check that the binary runs (`{self.path}`, then `uci`), "
            f"or {INSTALL_HINT}"
        )

    def close(self) -> None:
        """Quit the process (kill it if it does not quit); safe to call twice."""
        engine, self._engine = self._engine, None
        _LIVE_ENGINES.discard(self)
        if engine is None:
            return
        try:
            with contextlib.suppress(chess.engine.EngineError, OSError, TimeoutError, RuntimeError):
                engine.quit()  # already dead or not answering: closing the transport kills it
        finally:
            engine.close()


# -------------------------------------------------------------------------- built-in players


def random_move(board: chess.Board, rng: random.Random) -> chess.Move:
    """A uniformly random legal move."""
    return rng.choice(list(board.legal_moves))


def captured_value(board: chess.Board, move: chess.Move) -> int:
    """The value (pawn 1 ... queen 9) of the piece ``move`` captures; 0 for a quiet move."""
    if board.is_en_passant(move):
        return PIECE_VALUES[chess.PAWN]
    piece = board.piece_at(move.to_square)
    return 0 if piece is None or piece.color == board.turn else PIECE_VALUES[piece.piece_type]


def greedy_move(board: chess.Board, rng: random.Random) -> chess.Move:
    """A capture of the most valuable piece (random among equals), else a random legal move."""
    moves = list(board.legal_moves)
    values = [captured_value(board, m) for m in moves]
    best = max(values)
    if best == 0:
        return rng.choice(moves)
    return rng.choice([m for m, v in zip(moves, values) if v == best])


def mate_in_one(board: chess.Board) -> chess.Move | None:
    """A move that mates at once, or None."""
    for move in board.legal_moves:
        board.push(move)
        mate = board.is_checkmate()
        board.pop()
        if mate:
            return move
    return None


def king_region(board: chess.Board, color: chess.Color) -> int:
    """How many squares the ``color`` king can reach by king steps over squares the other side does
    not attack (the "box" a mating attack shrinks); attacks are seen through the king itself."""
    king = board.king(color)
    if king is None:
        return 0
    probe = board.copy(stack=False)
    probe.remove_piece_at(king)
    attacked = 0
    for square in chess.scan_forward(probe.occupied_co[not color]):
        attacked |= probe.attacks_mask(square)
    safe = chess.BB_ALL & ~attacked & ~probe.occupied_co[color]
    seen, frontier = chess.BB_SQUARES[king], chess.BB_SQUARES[king]
    while frontier:
        grown = 0
        for square in chess.scan_forward(frontier):
            grown |= chess.BB_KING_ATTACKS[square]
        frontier = grown & safe & ~seen
        seen |= frontier
    return chess.popcount(seen)


def position_key(board: chess.Board) -> tuple:
    """A cheap key of the piece placement and side to move (for counting repeated positions)."""
    return (
        board.pawns,
        board.knights,
        board.bishops,
        board.rooks,
        board.queens,
        board.kings,
        board.occupied_co[chess.WHITE],
        board.turn,
    )


def _heuristic_score(board: chess.Board, move: chess.Move, seen: dict | None) -> float:
    board.push(move)
    try:
        replies = list(board.legal_moves)
        if not replies:
            return 1e9 if board.is_check() else -1e9  # mate, or stalemate
        if board.is_insufficient_material():
            return -1e9
        repeats = seen.get(position_key(board), 0) if seen else 0
        hanging = max(captured_value(board, m) for m in replies)
        region = king_region(board, chess.BLACK)
        distance = chess.square_distance(board.king(chess.WHITE), board.king(chess.BLACK))
        return (
            -1000.0 * hanging - 10.0 * region - 3.0 * len(replies) - 2.0 * distance - 50.0 * repeats
        )
    finally:
        board.pop()


def heuristic_move(board: chess.Board, rng: random.Random, seen: dict | None = None) -> chess.Move:
    """A one-move-deep mating heuristic for the endgames: mate if possible; never stalemate or leave
    a piece en prise; otherwise shrink the black king's box, then its moves, then bring the king
    closer (ties broken at random). ``seen`` counts positions (``position_key``) reached earlier
    in the game; revisits are penalised so the heuristic does not walk into a repetition draw. It
    plays any position, but it is built for the lone-king endgames."""
    moves = list(board.legal_moves)
    scores = [_heuristic_score(board, m, seen) for m in moves]
    best = max(scores)
    return rng.choice([m for m, s in zip(moves, scores) if s == best])


def illegal_san(board: chess.Board, rng: random.Random) -> str:
    """A well-formed SAN string that is not a legal move here (what a confused model writes)."""
    for _ in range(100):
        piece = rng.choice(["", "K", "Q", "R", "B", "N"])
        text = piece + rng.choice(chess.SQUARE_NAMES)
        if parse_move(board, text) is None:
            return text
    return "Ka9"


# ------------------------------------------------------------------------------ positions


def random_position(pieces: str, rng: random.Random) -> str:
    """A random legal position (FEN) with exactly ``pieces`` (FEN letters: lower case black, upper
    case white; one king each), White to move and not in check, no castling or en passant."""
    board = chess.Board(None)
    for _ in range(100_000):
        board.clear()
        squares = rng.sample(chess.SQUARES, len(pieces))
        for letter, square in zip(pieces, squares):
            board.set_piece_at(square, chess.Piece.from_symbol(letter))
        if board.is_valid() and not board.is_check() and not board.is_game_over():
            return board.fen()
    raise ValueError(f"found no legal position for pieces={pieces!r}")


def check_pieces(pieces: str) -> str:
    """Check a piece string such as "kQK" (FEN letters, one king per side, <= 32 pieces)."""
    if not isinstance(pieces, str) or set(pieces) - set("kqrbnpKQRBNP"):
        raise ValueError(f"pieces must be FEN piece letters like 'kQK' or 'kRK', got {pieces!r}")
    if pieces.count("k") != 1 or pieces.count("K") != 1 or len(pieces) > 32:
        raise ValueError(
            f"pieces needs exactly one 'k' and one 'K' (at most 32 pieces), got {pieces!r}"
        )
    return pieces


def endgame_targets(pieces: str, n: int) -> list[str]:
    """The fixed evaluation positions of an endgame: ``n`` distinct positions from a seed derived
    from ``pieces`` (the same on every machine and Python version)."""
    rng, out = random.Random(f"chess_endgame:{pieces}"), []
    while len(out) < n:
        fen = random_position(pieces, rng)
        if fen not in out:
            out.append(fen)
    return out


def start_board(fen: str) -> chess.Board:
    """The board of a starting FEN; ValueError unless it is legal, White to move and not over."""
    try:
        board = chess.Board(fen)
    except (ValueError, TypeError) as err:
        raise ValueError(f"not a FEN: {fen!r} ({err})") from None
    if not board.is_valid():
        raise ValueError(f"illegal position: {fen!r} ({board.status()!r})")
    if board.turn != chess.WHITE:
        raise ValueError(f"the agent plays White: the FEN must have White to move, got {fen!r}")
    if board.is_game_over():
        raise ValueError(f"the game is already over in {fen!r}")
    return board


# ------------------------------------------------------------------------------------ the env


class ChessEnv:
    """The agent (White) against ``opponent``; the module docstring gives text, rewards, ends."""

    def __init__(
        self,
        name: str,
        targets: list[str],
        pieces: str | None,
        opponent: str,
        max_moves: int,
        max_illegal: int,
        engine: Engine | None,
    ):
        self.name, self.targets, self.pieces = name, list(targets), pieces
        self.opponent, self.max_moves, self.max_illegal = opponent, max_moves, max_illegal
        self.engine = engine
        self._finalizer = weakref.finalize(self, engine.close) if engine is not None else None
        self._target_set = set(self.targets)
        self.rng = random.Random()
        self.board, self.target, self.done = chess.Board(), "", True
        self.moves, self.illegal_streak, self._game = 0, 0, 0

    @property
    def engine_elo(self) -> int | None:
        """The Elo Stockfish actually plays at (known once the engine has started)."""
        return None if self.engine is None else self.engine.effective_elo

    def obs(self) -> str:
        return spaced(self.board.fen())

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode: ``options={"target": t}`` (one of ``targets``), ``{"fen": FEN}`` (any
        legal position, White to move), or neither (chess: a random target; endgame: a fresh random
        position). ``seed`` seeds the position draw and the built-in opponents."""
        if seed is not None:
            self.rng.seed(seed)
        options = dict(options or {})
        unknown = set(options) - {"target", "fen"}
        if unknown:
            raise ValueError(
                f"{self.name}: unknown reset option(s) {sorted(unknown)}; valid: ['fen', 'target']"
            )
        target, fen = options.get("target"), options.get("fen")
        if target is not None and fen is not None:
            raise ValueError(f"{self.name}: give reset option 'target' or 'fen', not both")
        if target is not None and target not in self._target_set:
            raise ValueError(
                f"{self.name}: unknown target {target!r}; valid targets: "
                f"{self.targets[:3]}{' ...' if len(self.targets) > 3 else ''}"
                f" ({len(self.targets)} FENs in env.targets)"
            )
        start = target or fen or self._draw_start()
        self.board = start_board(start)
        self.target, self.done = start, False
        self.moves, self.illegal_streak, self._game = 0, 0, self._game + 1
        return self.obs(), self._info(won=False)

    def _draw_start(self) -> str:
        if self.pieces is None:
            return self.rng.choice(self.targets)
        while True:
            fen = random_position(self.pieces, self.rng)
            if fen not in self._target_set:
                return fen

    def _info(self, won: bool, **extra) -> dict:
        result = self.board.result() if self.board.is_game_over() else "*"
        info = {
            "target": self.target,
            "won": won,
            "moves": self.moves,
            "illegal_streak": self.illegal_streak,
            "result": result,
            "illegal": False,
            "move": None,
            "opponent_move": None,
            "engine_score": None,
        }
        info.update(extra)
        return info

    def _opponent_move(self) -> tuple[chess.Move, int | None]:
        if self.opponent == "stockfish":
            return self.engine.play(self.board, game=(id(self), self._game))
        player = greedy_move if self.opponent == "greedy" else random_move
        return player(self.board, self.rng), None

    def step(self, action: str):
        """Play one agent move (and the opponent's answer). Returns (obs, reward, terminated,
        truncated, info); info adds "illegal", "move" / "opponent_move" (SAN), "result", "moves",
        "illegal_streak" and "engine_score" (Stockfish's centipawns for White, or None)."""
        if self.done:
            raise RuntimeError(
                f"{self.name}: step() called on a finished episode; call reset() first"
            )
        self.moves += 1
        move = parse_move(self.board, action)
        if move is None:
            self.illegal_streak += 1
            capped = self.illegal_streak >= self.max_illegal
            return self._end(-1.0, capped, self._info(False, illegal=True))
        self.illegal_streak = 0
        san = self.board.san(move)
        self.board.push(move)
        if self.board.is_game_over():
            won = self.board.is_checkmate()
            return self._end(1.0 if won else 0.0, True, self._info(won, move=san))
        reply, score = self._opponent_move()
        reply_san = self.board.san(reply)
        self.board.push(reply)
        over = self.board.is_game_over()
        reward = -1.0 if self.board.is_checkmate() else 0.0
        info = self._info(False, move=san, opponent_move=reply_san, engine_score=score)
        return self._end(reward, over, info)

    def _end(self, reward: float, terminated: bool, info: dict):
        truncated = not terminated and self.moves >= self.max_moves
        self.done = terminated or truncated
        return self.obs(), reward, terminated, truncated, info

    def close(self) -> None:
        """Stop the engine process (if any); a later engine move starts a new one."""
        if self.engine is not None:
            self.engine.close()


_ENV_OPTIONS = (
    "variant",
    "opponent",
    "pieces",
    "elo",
    "nodes",
    "stockfish_path",
    "max_moves",
    "max_illegal",
    "targets",
    "n_targets",
)


def make(
    variant: str = "chess",
    opponent: str | None = None,
    pieces: str | None = None,
    elo: int | None = 1200,
    nodes: int = DEFAULT_NODES,
    stockfish_path: str | None = None,
    max_moves: int | None = None,
    max_illegal: int = 5,
    targets: list[str] | None = None,
    n_targets: int = 100,
    **unknown,
) -> ChessEnv:
    """Build ``chess`` (``variant="chess"``) or ``chess_endgame`` (``variant="endgame"``).

    opponent: "stockfish" (default for chess; fails with install instructions when the binary is
    missing), "greedy" (default for endgames) or "random". elo: Stockfish's UCI_Elo (1200 as in the
    reference, clamped into the engine's range; None = full strength). nodes: Stockfish's node
    budget per move (2,000). pieces: the endgame's piece string ("kQK", "kRK", ...). max_moves:
    agent steps per episode (400 chess / 50 endgame). max_illegal: consecutive illegal moves that
    end the episode (5). targets: starting FENs for evaluation (chess: the start position;
    endgame: ``n_targets`` fixed random positions)."""
    if unknown:
        raise ValueError(
            f"unknown option(s) {sorted(unknown)} for chess; valid options: {sorted(_ENV_OPTIONS)}"
        )
    if variant not in ("chess", "endgame"):
        raise ValueError(f"variant must be 'chess' or 'endgame', got {variant!r}")
    endgame = variant == "endgame"
    if pieces is not None and not endgame:
        raise ValueError("pieces= only applies to chess_endgame")
    pieces = check_pieces(pieces or "kQK") if endgame else None
    opponent = opponent or ("greedy" if endgame else "stockfish")
    if opponent not in OPPONENTS:
        raise ValueError(f"opponent must be one of {OPPONENTS}, got {opponent!r}")
    max_moves = max_moves if max_moves is not None else (50 if endgame else 400)
    if max_moves < 1 or max_illegal < 1:
        raise ValueError(f"max_moves and max_illegal must be >= 1, got {max_moves}, {max_illegal}")
    if targets is None:
        targets = endgame_targets(pieces, n_targets) if endgame else [chess.STARTING_FEN]
    if not targets:
        raise ValueError("targets is empty")
    for fen in targets:
        start_board(fen)
    engine = None
    if opponent == "stockfish":
        engine = Engine(require_stockfish(stockfish_path), elo, nodes)
    name = "chess_endgame" if endgame else "chess"
    return ChessEnv(name, targets, pieces, opponent, max_moves, max_illegal, engine)


# -------------------------------------------------------------------------- scripted policies


class ChessPolicy:
    """A scripted White player on observations (spaced FENs); returns a spaced SAN move.

    Modes: "suboptimal" (the default data policy, no engine): each move is, with probability
    ``p_illegal`` (0.05), a well-formed but illegal SAN, else with probability ``p_heuristic``
    (0.7) the heuristic move, else a random legal move; "random": uniform legal moves; "greedy":
    mate in one, else capture the most valuable piece, else random; "heuristic":
    ``heuristic_move`` (a one-move mating heuristic for the endgames); "stockfish_<elo>":
    Stockfish limited to that Elo (the Q-SFT data: Stockfish at several strengths as the agent);
    "stockfish": full strength. The Stockfish modes search ``nodes`` (20,000) nodes a move."""

    def __init__(
        self,
        seed: int = 0,
        mode: str = MODES[0],
        p_illegal: float = 0.05,
        p_heuristic: float = 0.7,
        nodes: int = POLICY_NODES,
        stockfish_path: str | None = None,
    ):
        self.mode, self.rng = mode, random.Random(seed)
        self.p_illegal, self.p_heuristic = p_illegal, p_heuristic
        self.engine, self.seen = None, {}
        if mode == "stockfish" or mode.startswith("stockfish_"):
            elo = None if mode == "stockfish" else _mode_elo(mode)
            self.engine = Engine(require_stockfish(stockfish_path), elo, nodes)
            self._finalizer = weakref.finalize(self, self.engine.close)
        elif mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} (or stockfish_<elo>), got {mode!r}")

    def move(self, board: chess.Board) -> str:
        """The SAN (unspaced) this policy plays in ``board``."""
        if self.engine is not None:
            return board.san(self.engine.play(board)[0])
        if self.mode == "suboptimal" and self.rng.random() < self.p_illegal:
            return illegal_san(board, self.rng)
        explore = self.mode == "suboptimal" and self.rng.random() >= self.p_heuristic
        if self.mode == "random" or explore:
            return board.san(random_move(board, self.rng))
        if self.mode == "greedy":
            return board.san(mate_in_one(board) or greedy_move(board, self.rng))
        move = heuristic_move(board, self.rng, self.seen)
        board.push(move)
        key = position_key(board)
        board.pop()
        self.seen[key] = self.seen.get(key, 0) + 1
        return board.san(move)

    def __call__(self, obs: str) -> str:
        try:
            board = chess.Board(fen_from_obs(obs))
        except ValueError:
            board = None
        if board is None or board.is_game_over() or board.turn != chess.WHITE:
            return spaced(illegal_san(chess.Board(), self.rng))
        if board.fullmove_number == 1 or len(self.seen) > 10_000:  # a new game starts
            self.seen.clear()
        return spaced(self.move(board))

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def _mode_elo(mode: str) -> int:
    try:
        return int(mode[len("stockfish_") :])
    except ValueError:
        raise ValueError(f"mode {mode!r}: expected stockfish_<elo>, e.g. stockfish_1800") from None


def scripted_policy(seed: int = 0, mode: str = MODES[0], **options) -> ChessPolicy:
    """A scripted player (see ``ChessPolicy``). Env options are accepted and ignored, except
    ``nodes`` and ``stockfish_path`` which the Stockfish modes use."""
    own = {
        k: options.pop(k)
        for k in ("p_illegal", "p_heuristic", "nodes", "stockfish_path")
        if k in options
    }
    unknown = set(options) - set(_ENV_OPTIONS)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for the chess scripted policy")
    return ChessPolicy(seed=seed, mode=mode, **own)


# ---------------------------------------------------------------------------------- corpus


def _episode_text(env: ChessEnv, policy: ChessPolicy, seed: int) -> str:
    obs, _ = env.reset(seed=seed)
    lines, done = [obs], False
    while not done:
        action = policy(obs)
        obs, _, term, trunc, _ = env.step(action)
        lines += [action, obs]
        done = term or trunc
    return "\n".join(lines) + "\n"


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` sample texts for the tiny tokenizer: whole episodes (observation and action lines)
    against the greedy opponent, alternating full games (cut at 30 moves; random legal moves with
    5% illegal ones, the heuristic being slow on full boards) and kQK / kRK endgames (the
    suboptimal policy), at most 300 of them (a few seconds), then single lines (spaced FENs and
    moves) drawn from those games. No engine needed."""
    envs_ = [
        make("chess", opponent="greedy", max_moves=30),
        make("endgame", pieces="kQK"),
        make("endgame", pieces="kRK"),
    ]
    policies = [
        ChessPolicy(seed=seed, mode="suboptimal", p_heuristic=0.0),
        ChessPolicy(seed=seed, mode="suboptimal"),
    ]
    rng = random.Random(seed)
    episodes = [
        _episode_text(envs_[i % 3], policies[i % 3 > 0], seed * 100_003 + i)
        for i in range(min((n + 1) // 2, 300))
    ]
    lines = [line for text in episodes for line in text.splitlines()]
    extra = [rng.choice(lines) for _ in range(n - len(episodes))] if lines else []
    return (episodes + extra)[:n]
