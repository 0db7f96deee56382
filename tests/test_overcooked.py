"""Overcooked (tomato salad, tomato-lettuce salad): kitchen, macro-actions, rewards, partial view,
invalid actions, step cap, scripted policies, datasets, vectorised envs (fast, CPU only)."""

import json

import pytest

import envs
from envs import overcooked as oc

TS, TLS = "overcooked_tomato_salad", "overcooked_tomato_lettuce_salad"
START = (
    "There is a fixed cutting board in the room. You notice a tomato on the table. Currently you "
    "don't have anything in hand.\nAvailable actions:\n- pick up the tomato\n- take the bowl\n"
    "- walk to the cutting board\n- serve nothing\n- chop nothing\n"
    "To serve the dish of a bowl only containing chopped tomato, you should first"
)


def run(env, actions):
    """Step through ``actions``; returns the list of (reward, primitive steps, info)."""
    out = []
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        out.append((r, info["primitive_steps"], info))
    return out


def description(obs):
    return obs.split("\nAvailable actions:")[0]


def test_layouts_are_the_reference_7x7_kitchens():
    for task, rows in oc.LAYOUTS.items():
        assert len(rows) == 7 and all(len(r) == 7 for r in rows), task
    k = oc.Kitchen("tomato salad")
    assert (k.start, k.boards, k.delivery) == ((1, 4), [(1, 0)], (3, 0))
    assert k.origin == {"tomato": (0, 5), "bowl": (6, 5)} and k.front == [(1, 1)]
    k2 = oc.Kitchen("tomato-lettuce salad")
    assert k2.boards == [(1, 0), (2, 0)] and k2.foods == ["tomato", "lettuce", "onion"]
    assert k2.origin["lettuce"] == (1, 6) and k2.origin["onion"] == (2, 6)


def test_start_observation_and_info():
    env = envs.make(TS)
    obs, info = env.reset(seed=3)
    assert obs == START
    assert info["valid_actions"] == oc.parse_actions(obs) == env.actions
    assert info["target"] == "tomato salad" == env.targets[0] and not info["won"]
    obs2, _ = envs.make(TLS).reset()
    assert description(obs2) == (
        "There are two fixed cutting boards in the room. You notice a tomato, a lettuce "
        "and an onion on the different tables. Currently you don't have anything in hand."
    )
    assert oc.parse_actions(obs2) == [
        "pick up the tomato",
        "pick up the lettuce",
        "pick up the onion",
        "take the empty bowl",
        "walk to the first cutting board",
        "walk to the second cutting board",
        "serve nothing",
        "chop nothing",
    ]
    assert obs2.endswith("only containing chopped tomato and lettuce, you should first")


def test_best_tomato_salad_is_6_macro_actions_28_primitive_steps():
    """Hand-worked path: (1,4)->(1,5) take tomato [2]; walk 4 to (1,1), put on board [5]; chop x3
    [3]; take the chopped tomato back [1]; walk 8 to (5,5), put it in the bowl, lift the bowl [10];
    walk 6 to (3,1), serve [7]. Return: chop bonus 0.2 + dish 1 - 28 * 0.001 = 1.172."""
    env = envs.make(TS)
    env.reset()
    plan = [
        "pick up the tomato",
        "put the tomato on the cutting board",
        "chop the tomato",
        "pick up the tomato",
        "take the bowl",
        "serve the dish",
    ]
    out = run(env, plan)
    assert [n for _, n, _ in out] == [2, 5, 3, 1, 10, 7]
    assert [round(r, 3) for r, _, _ in out] == [-0.002, -0.005, 0.197, -0.001, -0.01, 0.993]
    assert out[-1][2]["won"] and env.done and out[-1][2]["total_primitive_steps"] == 28
    assert sum(r for r, _, _ in out) == pytest.approx(1.172)


@pytest.mark.parametrize(
    "name, macros, prims, ret", [(TS, 6, 28, 1.2 - 0.028), (TLS, 10, 45, 1.4 - 0.045)]
)
def test_optimal_policy_reaches_the_search_optimum(name, macros, prims, ret):
    """28 and 45 primitive steps are the optima of an exhaustive search over macro-actions."""
    env, policy = envs.make(name), envs.scripted_policy(name, mode="optimal")
    obs, _ = env.reset()
    total, n, done = 0.0, 0, False
    while not done:
        obs, r, term, trunc, info = env.step(policy(obs))
        total, n, done = total + r, n + 1, term or trunc
    assert term and info["won"] and n == macros and info["total_primitive_steps"] == prims
    assert total == pytest.approx(ret)


@pytest.mark.parametrize("name", [TS, TLS])
def test_greedy_action_is_always_available(name):
    """In the states a very random policy reaches, the greedy choice is always a listed action."""
    env, noisy = envs.make(name), envs.scripted_policy(name, seed=1)
    noisy.p_random = 0.8
    for _ in range(150):
        obs, done = env.reset()[0], False
        while not done:
            assert oc.greedy_action(obs) in oc.parse_actions(obs), obs
            obs, _, term, trunc, _ = env.step(noisy(obs))
            done = term or trunc


def test_chop_bonus_only_for_recipe_ingredients():
    env = envs.make(TLS)
    env.reset()
    out = run(
        env, ["pick up the onion", "put the onion on the second cutting board", "chop the onion"]
    )
    assert out[2][1] == 3 and out[2][0] == pytest.approx(-0.003)  # the onion is not in the recipe
    assert "A chopped onion is on the second cutting board." in env.obs
    env.reset()
    out = run(
        env,
        ["pick up the lettuce", "put the lettuce on the first cutting board", "chop the lettuce"],
    )
    assert out[2][0] == pytest.approx(0.2 - 0.003)


def test_wrong_delivery_costs_and_resets_the_items():
    env = envs.make(TS)
    env.reset()
    out = run(
        env,
        [
            "pick up the tomato",
            "put the tomato on the cutting board",
            "chop the tomato",
            "pick up the tomato",
            "serve the dish",
        ],
    )
    r, n, info = out[-1]
    assert n == 3 and r == pytest.approx(-0.1 - 0.003) and not info["won"] and not env.done
    assert (
        env.where("tomato") == (0, 5) and env.chops["tomato"] == 0
    )  # back on its table, unchopped
    env.reset()
    out = run(env, ["take the bowl", "serve the dish"])  # an empty bowl is a wrong dish too
    assert out[1][0] == pytest.approx(-0.1 - 0.007) and env.where("bowl") == (6, 5)


def test_every_primitive_step_costs_and_empty_handed_walks_stop_in_front():
    env = envs.make(TS)
    env.reset()
    out = run(env, ["chop nothing", "serve nothing", "walk to the cutting board"])
    assert [(round(r, 3), n) for r, n, _ in out] == [(-0.001, 1), (-0.005, 5), (-0.002, 2)]
    assert env.agent == (1, 1) and env.top((1, 0)) is None and env.held is None
    assert "standing in front of the cutting board without anything in hand" in env.obs


def test_state_dependent_action_texts():
    env = envs.make(TLS)
    env.reset()
    run(env, ["take the empty bowl"])
    assert oc.parse_actions(env.obs) == [
        "put the tomato in the bowl",
        "put the lettuce in the bowl",
        "put the onion in the bowl",
        "take the empty bowl",
        "put the bowl on the first cutting board",
        "put the bowl on the second cutting board",
        "serve the dish",
        "chop nothing",
    ]
    env.reset()
    run(
        env,
        [
            "pick up the tomato",
            "put the tomato on the first cutting board",
            "chop the tomato",
            "take the empty bowl",
            "put the tomato in the bowl",
        ],
    )
    assert "carrying a bowl containing chopped tomato in hand" in env.obs
    assert "- take the bowl\n" in env.obs  # the bowl is no longer empty


def test_partial_view_hides_what_is_out_of_the_5x5_square():
    env = envs.make(TS)
    obs, _ = env.reset()
    assert "bowl" not in description(obs)  # the bowl at (6, 5) is 5 rows away
    run(env, ["pick up the tomato", "put the tomato on the cutting board"])
    assert "An unchopped tomato is on the cutting board." in env.obs
    run(env, ["take the bowl"])  # now at (5, 5): the board at (1, 0) is out of view
    assert env.agent == (5, 5) and "tomato" not in description(env.obs)
    assert description(env.obs).endswith("Currently you are carrying a bowl in hand.")
    out = run(
        env, ["put the bowl on the cutting board"]
    )  # the board is taken: walks there, nothing else
    assert not out[0][2]["invalid"] and env.agent == (1, 1) and env.held == "bowl"
    assert "An unchopped tomato is on the cutting board." in env.obs


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "x" * 10_000,
        "chop the tomato",
        "pick up the tomato please",
        "🍅🔪",
        "please\npick up the tomato",
        "pick up\tthe tomatoes",
    ],
)
def test_invalid_actions_cost_and_change_nothing(bad):
    env = envs.make(TS)
    obs, _ = env.reset()
    obs2, r, term, trunc, info = env.step(bad)
    assert obs2 == obs and r == pytest.approx(-0.01) and info["invalid"] and not (term or trunc)
    assert info["total_primitive_steps"] == 1 and env.agent == (1, 4)


@pytest.mark.parametrize(
    "variant",
    [
        "pick up the tomato",
        "Pick up the TOMATO.",
        "  pick   up the tomato!\nnext",
        "pick-up the tomato",
        " pick up the tomato",
        "\n\npick up the tomato",
        "pick up the\u0000tomato",
    ],
)
def test_action_normalisation(variant):
    env = envs.make(TS)
    env.reset()
    _, r, _, _, info = env.step(variant)
    assert not info["invalid"] and env.held == "tomato" and r == pytest.approx(-0.002)


def test_non_string_action_is_invalid_not_an_exception():
    env = envs.make(TS)
    env.reset()
    assert env.step(None)[4]["invalid"] and env.step(42)[4]["invalid"]


def test_step_cap_truncates_at_200_primitive_steps_then_reset_is_required():
    env = envs.make(TS)
    env.reset()
    for t in range(200):
        obs, r, term, trunc, info = env.step("chop nothing")
        assert not term and trunc == (t == 199)
    assert info["total_primitive_steps"] == 200 and not info["won"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("chop nothing")
    env = envs.make(TS, max_steps=5)
    env.reset()
    _, _, term, trunc, info = env.step("take the bowl")  # 5 moves and the pick-up: cut after 5
    assert trunc and not term and info["total_primitive_steps"] == 5 and env.held is None


def test_reward_loop_of_the_reference_is_kept():
    """Chopping (+0.2) then serving the lone tomato (-0.1) can be repeated (kept as in TWOSOME)."""
    env = envs.make(TS)
    env.reset()
    loop = [
        "pick up the tomato",
        "put the tomato on the cutting board",
        "chop the tomato",
        "pick up the tomato",
        "serve the dish",
    ]
    first = sum(r for r, _, _ in run(env, loop))
    second = sum(r for r, _, _ in run(env, loop))
    assert first == pytest.approx(0.1 - 0.014) and second == pytest.approx(0.1 - 0.019)


def test_options_and_errors():
    with pytest.raises(ValueError, match="valid options"):
        envs.make(TS, colour="red")
    with pytest.raises(ValueError, match="valid tasks"):
        oc.make("onion soup")
    env = envs.make(TS)
    with pytest.raises(ValueError, match="valid targets"):
        env.reset(options={"target": "onion soup"})
    assert env.reset(options={"target": "tomato salad"})[1]["target"] == "tomato salad"
    with pytest.raises(ValueError, match="mode"):
        envs.scripted_policy(TS, mode="greedy")


@pytest.mark.parametrize("name", [TS, TLS])
def test_determinism_given_seeds(name):
    def episodes(seed):
        env, policy = envs.make(name), envs.scripted_policy(name, seed=seed)
        out = []
        for s in range(5):
            obs, _ = env.reset(seed=s)
            done, traj = False, []
            while not done:
                a = policy(obs)
                obs, r, term, trunc, _ = env.step(a)
                traj.append((a, r))
                done = term or trunc
            out.append(traj)
        return out

    assert episodes(7) == episodes(7) and episodes(7) != episodes(8)


def test_suboptimal_policy_leaves_room_above_it():
    weak = envs.summarize(envs.collect_scripted(TLS, 200, seed=0))
    best = envs.summarize(envs.collect_scripted(TLS, 5, seed=0, mode="optimal"))
    assert best["success_rate"] == 1.0 and best["mean_return"] == pytest.approx(1.355)
    assert 0.6 < weak["success_rate"] < 0.97 and weak["mean_return"] < best["mean_return"] - 0.2


def test_dataset_round_trip_and_cli(tmp_path):
    trajs = envs.collect_scripted(TLS, 8, seed=1)
    path = tmp_path / "oc.jsonl"
    envs.save_dataset(str(path), trajs)
    assert envs.load_dataset(str(path), env=TLS) == trajs
    assert all(t["target"] == "tomato-lettuce salad" for t in trajs)
    assert all(
        s["observation"].startswith("There are two fixed") for t in trajs for s in t["steps"]
    )
    from envs.collect import main

    out = tmp_path / "ts.jsonl"
    s = main(["--env", TS, "--episodes", "20", "--mode", "optimal", "--out", str(out)])
    assert s["success_rate"] == 1.0 and len(envs.load_dataset(str(out))) == 20
    assert json.loads(out.read_text().splitlines()[0])["steps"][0]["observation"] == START


def test_make_vec_matches_single_envs():
    n = 4
    vec = envs.make_vec(TLS, n)
    obs, infos = vec.reset(seed=10)
    singles = [envs.make(TLS) for _ in range(n)]
    for i, e in enumerate(singles):
        assert e.reset(seed=10 + i)[0] == obs[i]
    pols, pols2 = (
        [envs.scripted_policy(TLS, seed=i) for i in range(n)],
        [envs.scripted_policy(TLS, seed=i) for i in range(n)],
    )
    finished = [False] * n
    while any(vec.active):
        acts = [pols[i](obs[i]) if vec.active[i] else "" for i in range(n)]
        obs, rewards, dones, infos = vec.step(acts)
        for i, e in enumerate(singles):
            if finished[i]:
                assert rewards[i] == 0.0 and dones[i]
                continue
            assert acts[i] == pols2[i](e.obs)
            o, r, term, trunc, info = e.step(acts[i])
            assert (o, r, term or trunc, info["valid_actions"]) == (
                obs[i],
                rewards[i],
                dones[i],
                infos[i]["valid_actions"],
            )
            finished[i] = term or trunc


def test_corpus_has_both_tasks_and_the_action_texts():
    texts = envs.corpus(TS, 60)
    assert len(texts) == 60
    assert any(t.startswith("There is a fixed") and "\n" in t for t in texts)
    assert any(t.startswith("There are two fixed") for t in texts)
    assert "put the tomato on the cutting board" in texts or any(
        "put the tomato on" in t for t in texts
    )
