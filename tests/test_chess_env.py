"""envs/chess_env.py: chess and chess_endgame. Positions are hand-built FENs; tests that need the
Stockfish binary have "stockfish" in their names and are skipped (with the reason shown) without
it."""

import json
import os
import signal
import time

import chess
import pytest

import envs
from envs import chess_env
from envs.collect import collect_scripted, summarize

STOCKFISH = chess_env.find_stockfish()
needs_stockfish = pytest.mark.skipif(
    STOCKFISH is None, reason="Stockfish binary not found (install: apt-get install stockfish)"
)

# Black king a8, white king b6, queen h2: Qh8 mates; Qa2+ does not (Kb8).
MATE_IN_ONE = "k7/8/1K6/8/8/8/7Q/8 w - - 0 1"
# After any quiet white move the black rook takes the queen on e1 with mate (back rank).
MATED_AFTER_A3 = "k3r3/8/8/8/8/8/P5PP/4Q2K w - - 0 1"
# Black king a8 has no square while the queen stays on b6: a quiet king move stalemates.
STALEMATE_AFTER_KG2 = "k7/8/1Q6/8/8/8/8/7K w - - 0 1"
# Black can take the queen (Rxd5) or the rook (Bxa5); greedy takes the queen.
QUEEN_OR_ROOK = "3r3k/8/1b6/R2Q4/8/8/8/7K w - - 0 1"


def board_of(obs: str) -> chess.Board:
    return chess.Board(chess_env.fen_from_obs(obs))


def endgame(opponent="greedy", **kw):
    return envs.make("chess_endgame", opponent=opponent, **kw)


def test_observation_is_the_spaced_fen_and_round_trips():
    env = endgame()
    obs, info = env.reset(options={"fen": MATE_IN_ONE})
    assert obs == "k 7 / 8 / 1 K 6 / 8 / 8 / 8 / 7 Q / 8   w   -   -   0   1"
    assert chess_env.fen_from_obs(obs) == MATE_IN_ONE == info["target"]
    assert chess_env.fen_from_obs(MATE_IN_ONE) == MATE_IN_ONE  # a plain FEN passes through
    assert info["won"] is False and info["moves"] == 0


@pytest.mark.parametrize(
    "action", ["e4", "e 4", " e 4 \n", "e\t4", "e2e4", "e 4\nNf3 is next", "e4+"]
)
def test_legal_san_with_or_without_spaces(action):
    env = envs.make("chess", opponent="random")
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(action)
    board = board_of(obs)
    assert (reward, term, trunc, info["illegal"]) == (0.0, False, False, False)
    assert info["move"] == "e4" and board.piece_at(chess.E4) == chess.Piece.from_symbol("P")
    assert board.turn == chess.WHITE and board.fullmove_number == 2  # the opponent answered
    assert info["opponent_move"] is not None


@pytest.mark.parametrize(
    "action",
    [
        "e5",
        "K e 2",
        "",
        "   ",
        "x" * 10_000,
        "♔ e 4",
        "e4 e5",
        "--",
        "0000",
        "O-O",
        "Nf3\x00",
        "\n\n",
        "Qh5",
        "e4\u202e",
        "🙂",
    ],
)
def test_illegal_or_garbage_moves_cost_one_and_keep_the_position(action):
    env = envs.make("chess", opponent="random")
    start, _ = env.reset(seed=1)
    obs, reward, term, trunc, info = env.step(action)
    assert obs == start and reward == -1.0 and not term and not trunc
    assert info["illegal"] and info["illegal_streak"] == 1 and info["move"] is None


def test_non_string_action_is_an_illegal_move_not_an_exception():
    env = envs.make("chess", opponent="random")
    env.reset(seed=0)
    assert env.step(None)[1] == -1.0 and env.step(42)[1] == -1.0


def test_five_illegal_moves_in_a_row_end_the_episode():
    env = envs.make("chess", opponent="random")
    env.reset(seed=0)
    rewards = [env.step("Ke5")[1] for _ in range(4)]
    assert env.step("d4")[4]["illegal_streak"] == 0  # a legal move resets the streak
    for _ in range(4):
        _, r, term, trunc, info = env.step("Ke5")
        rewards.append(r)
        assert not term
    _, r, term, trunc, info = env.step("Ke5")
    assert r == -1.0 and term and not trunc and info["illegal_streak"] == 5 and not info["won"]
    assert sum(rewards) + r == -9.0 and info["result"] == "*"
    with pytest.raises(RuntimeError, match="reset"):
        env.step("d5")


def test_mating_move_gets_plus_one_and_ends():
    env = endgame()
    env.reset(options={"fen": MATE_IN_ONE})
    obs, reward, term, trunc, info = env.step("Q h 8")
    assert (reward, term, trunc, info["won"], info["result"]) == (1.0, True, False, True, "1-0")
    assert board_of(obs).is_checkmate() and info["opponent_move"] is None
    env.reset(options={"fen": MATE_IN_ONE})
    obs, reward, term, trunc, info = env.step("Q a 2")  # check, not mate: the king walks to b8
    assert (reward, term, info["won"], info["opponent_move"]) == (0.0, False, False, "Kb8")


def test_mated_agent_gets_minus_one():
    env = endgame(opponent="greedy")
    env.reset(options={"fen": MATED_AFTER_A3})
    obs, reward, term, trunc, info = env.step("a 3")
    assert info["opponent_move"] == "Rxe1#" and board_of(obs).is_checkmate()
    assert (reward, term, trunc, info["won"], info["result"]) == (-1.0, True, False, False, "0-1")


def test_draws_score_zero():
    env = endgame()
    env.reset(options={"fen": STALEMATE_AFTER_KG2})
    obs, reward, term, _, info = env.step("K g 2")
    assert (reward, term, info["won"], info["result"]) == (0.0, True, False, "1/2-1/2")
    assert board_of(obs).is_stalemate()
    env.reset(options={"fen": "k7/8/8/8/8/8/8/1R5K w - - 0 1"})
    obs, reward, term, _, info = env.step("Rb7")  # hangs the rook: Kxb7 leaves two bare kings
    assert info["opponent_move"] == "Kxb7" and (reward, term, info["result"]) == (
        0.0,
        True,
        "1/2-1/2",
    )


def test_greedy_opponent_takes_the_most_valuable_piece():
    env = endgame(opponent="greedy")
    for seed in range(5):
        env.reset(seed=seed, options={"fen": QUEEN_OR_ROOK})
        assert env.step("Kh2")[4]["opponent_move"] == "Rxd5"


def test_move_cap_truncates_and_counts_illegal_moves():
    env = endgame(max_moves=3)
    env.reset(seed=0, options={"fen": "k7/8/8/8/8/8/8/KR6 w - - 0 1"})
    assert env.step("Rc1")[2:4] == (False, False)
    assert env.step("Rz9")[2:4] == (False, False)
    _, reward, term, trunc, info = env.step("Rb1")
    assert (reward, term, trunc, info["moves"]) == (0.0, False, True, 3)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("Rc1")
    assert envs.make("chess", opponent="random").max_moves == 400 and endgame().max_moves == 50


@pytest.mark.parametrize("pieces", ["kQK", "kRK"])
def test_endgame_positions_are_legal_not_in_check_and_apart_from_targets(pieces):
    env = endgame(pieces=pieces)
    counts = {p: pieces.count(p) for p in set(pieces)}
    starts = [env.reset(seed=s)[1]["target"] for s in range(150)]
    assert starts == [env.reset(seed=s)[1]["target"] for s in range(150)]  # seeds repeat
    assert len(set(starts)) > 140 and not set(starts) & set(env.targets)
    assert len(env.targets) == len(set(env.targets)) == 100
    assert env.targets == endgame(pieces=pieces).targets  # fixed evaluation positions
    for fen in starts + env.targets:
        board = chess.Board(fen)
        assert board.is_valid() and board.turn == chess.WHITE and not board.is_check()
        symbols = [p.symbol() for p in board.piece_map().values()]
        assert {s: symbols.count(s) for s in set(symbols)} == counts
    obs, info = env.reset(options={"target": env.targets[7]})
    assert info["target"] == env.targets[7] and chess_env.fen_from_obs(obs) == env.targets[7]


def test_chess_targets_and_option_errors():
    env = envs.make("chess", opponent="greedy")
    assert env.targets == [chess.STARTING_FEN] and env.reset()[1]["target"] == chess.STARTING_FEN
    for options, message in [
        ({"colour": "w"}, "valid: \\['fen', 'target'\\]"),
        ({"target": "k7/8/8/8/8/8/8/K7 w - - 0 1"}, "valid targets"),
        ({"fen": "k7/8/8/8/8/8/8/KQ6 b - - 0 1"}, "White to move"),
        ({"fen": "not a fen"}, "not a FEN"),
        ({"fen": "k7/1Q6/1K6/8/8/8/8/8 w - - 0 1"}, "illegal position"),
        ({"fen": "7k/8/8/8/8/8/5PPP/r5K1 w - - 0 1"}, "already over"),
        ({"fen": MATE_IN_ONE, "target": chess.STARTING_FEN}, "not both"),
    ]:
        with pytest.raises(ValueError, match=message):
            env.reset(options=options)
    for kwargs, message in [
        ({"colour": "w"}, "valid options"),
        ({"opponent": "deep blue"}, "opponent"),
        ({"pieces": "kQK"}, "only applies"),
    ]:
        with pytest.raises(ValueError, match=message):
            envs.make("chess", **kwargs)
    for pieces in ["kQ", "kQKK", "kXK"]:
        with pytest.raises(ValueError, match="pieces"):
            envs.make("chess_endgame", pieces=pieces)


def test_missing_binary_says_how_to_install(monkeypatch):
    monkeypatch.setattr(chess_env, "SEARCH_DIRS", [])
    monkeypatch.setenv("PATH", "")
    for build in [
        lambda: envs.make("chess"),
        lambda: envs.make("chess_endgame", opponent="stockfish"),
        lambda: envs.make("chess", stockfish_path="/nonexistent/stockfish"),
        lambda: envs.scripted_policy("chess", mode="stockfish_1800"),
    ]:
        with pytest.raises(FileNotFoundError) as err:
            build()
        assert "apt-get install stockfish" in str(err.value) and "stockfish_path" in str(err.value)
    assert envs.make("chess", opponent="random").reset(seed=0)[0].startswith("r n b q k b n r")


def test_engine_that_keeps_failing_gives_a_clear_error(tmp_path):
    fake = tmp_path / "stockfish"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    env = envs.make("chess", stockfish_path=str(fake))
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match="failed twice in a row"):
        env.step("e4")
    assert env.engine.failures == 2 and env.engine.pid is None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def _play_checked(env, policy, steps):
    """Play up to ``steps`` moves, checking each opponent move is legal on our own board."""
    obs, _ = env.reset(seed=0)
    board = board_of(obs)
    for _ in range(steps):
        obs, _, term, trunc, info = env.step(policy(obs))
        assert not info["illegal"]
        board.push_san(info["move"])
        if info["opponent_move"] is not None:
            board.push_san(info["opponent_move"])  # raises if the engine's move were illegal
        assert board.fen() == chess_env.fen_from_obs(obs)
        if term or trunc:
            break
    return info


@needs_stockfish
def test_stockfish_opponent_answers_legal_moves_and_close_ends_the_process():
    env = envs.make("chess")
    assert env.engine.pid is None  # started lazily
    info = _play_checked(env, envs.scripted_policy("chess", mode="random"), 12)
    pid = env.engine.pid
    assert (
        pid is not None and _alive(pid) and env.engine_elo == 1350
    )  # 1200 clamped to SF 15.1's min
    assert isinstance(info["engine_score"], int)
    env.close()
    deadline = time.time() + 5
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(pid) and env.engine.pid is None


@needs_stockfish
def test_stockfish_is_restarted_once_after_it_dies():
    env = envs.make("chess")
    policy = envs.scripted_policy("chess", mode="random")
    obs, _ = env.reset(seed=0)
    obs = env.step(policy(obs))[0]
    pid = env.engine.pid
    os.kill(pid, signal.SIGKILL)
    info = env.step(policy(obs))[4]
    assert info["opponent_move"] is not None and not info["illegal"]
    assert env.engine.failures == 1 and env.engine.pid not in (None, pid)
    env.close()


@needs_stockfish
def test_stockfish_full_strength_is_deterministic_and_agents_mate():
    env = envs.make("chess", elo=None)
    games = []
    for _ in range(2):
        policy = envs.scripted_policy("chess", mode="random", seed=0)
        obs, _ = env.reset(seed=0)
        replies = []
        for _ in range(8):
            obs, _, term, trunc, info = env.step(policy(obs))
            replies.append(info["opponent_move"])
            if term or trunc:
                break
        games.append(replies)
    assert games[0] == games[1] and None not in games[0][:4]
    env.close()
    agent = envs.scripted_policy("chess_endgame", mode="stockfish")
    trajs = []
    env = endgame()
    for t in env.targets[:5]:
        obs, _ = env.reset(options={"target": t})
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(agent(obs))
            done = term or trunc
        trajs.append(info["won"])
    assert all(trajs)
    agent.close()


@needs_stockfish
def test_stockfish_elo_limited_agent_plays_legal_moves():
    agent = envs.scripted_policy("chess", mode="stockfish_1350")
    info = _play_checked(envs.make("chess", opponent="random"), agent, 10)
    assert info["move"] is not None and agent.engine.effective_elo == 1350
    agent.close()


def test_scripted_policies_order_and_determinism():
    assert chess_env.MODES[0] == "suboptimal"
    results = {
        m: summarize(collect_scripted("chess_endgame", 60, seed=0, mode=m))
        for m in ("suboptimal", "random", "heuristic")
    }
    assert results["heuristic"]["success_rate"] >= 0.95
    assert 0.3 < results["suboptimal"]["success_rate"] < results["heuristic"]["success_rate"] - 0.2
    assert results["random"]["success_rate"] < 0.1
    again = collect_scripted("chess_endgame", 10, seed=0)
    assert again == collect_scripted("chess_endgame", 10, seed=0)
    with pytest.raises(ValueError, match="mode"):
        envs.scripted_policy("chess", mode="grandmaster")


def test_heuristic_mates_with_the_rook_too():
    trajs = collect_scripted("chess_endgame", 30, seed=5, mode="heuristic", pieces="kRK")
    assert sum(t["success"] for t in trajs) >= 27
    assert all(t["steps"][-1]["reward"] == 1.0 for t in trajs if t["success"])


def test_dataset_round_trip_and_collect_cli(tmp_path, capsys):
    trajs = collect_scripted("chess_endgame", 8, seed=3)
    path = tmp_path / "kqk.jsonl"
    envs.save_dataset(str(path), trajs)
    assert envs.load_dataset(str(path), env="chess_endgame") == trajs
    step = trajs[0]["steps"][0]
    assert chess_env.fen_from_obs(step["observation"]) == trajs[0]["target"]
    assert " " in step["action"] or len(step["action"]) == 1
    from envs.collect import main

    out = tmp_path / "cli.jsonl"
    main(["--env", "chess_endgame", "--episodes", "20", "--out", str(out)])
    assert "episodes=20" in capsys.readouterr().out
    data = envs.load_dataset(str(out), env="chess_endgame")
    assert len(data) == 20 and all(json.dumps(t) for t in data)


def test_make_vec_steps_endgames_together():
    vec = envs.make_vec("chess_endgame", 3)
    obs, infos = vec.reset(seed=10)
    policies = [envs.scripted_policy("chess_endgame", seed=i, mode="heuristic") for i in range(3)]
    while any(vec.active):
        obs, _, dones, infos = vec.step([p(o) for p, o in zip(policies, obs)])
    assert all(dones) and all(i["won"] for i in infos)


def test_corpus_has_spaced_fens_and_moves():
    texts = chess_env.corpus(12, seed=0)
    assert len(texts) == 12 and texts == chess_env.corpus(12, seed=0)
    episodes = [t for t in texts if t.count("\n") > 2]
    assert len(episodes) >= 6 and any("r n b q k b n r" in t for t in episodes)
    assert set("".join(texts)) <= set("kqrbnpKQRBNP/0123456789 w-acdefghxO=+#\n")
