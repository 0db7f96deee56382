"""VirtualHome (food preparation with its variants, entertainment): house, actions, rewards,
partial view, invalid actions, step cap, scripted policies, datasets, vectorised envs (fast)."""

import pytest

import envs
from envs import virtualhome as vh
from envs.overcooked import parse_actions

FP, ENT = "virtualhome_food_preparation", "virtualhome_entertainment"
HOUSE = "There are four rooms: the kitchen, bathroom, bedroom, and living room."
FOOD_PLAN = [
    "walk to the pancake",
    "grab the pancake",
    "walk to the microwave",
    "open the microwave",
    "put the pancake in the microwave",
    "close the microwave",
]
ENT_PLAN = [
    "walk to the chips",
    "grab the chips",
    "walk to the milk",
    "grab the milk",
    "walk to the living room",
    "walk to the coffee table",
    "put the chips on the coffee table",
    "walk to the TV",
    "turn on the TV",
    "walk to the sofa",
    "sit on the sofa",
]


def run(env, actions):
    return [env.step(a) for a in actions]


def test_food_start_observation():
    env = envs.make(FP)
    obs, info = env.reset(seed=1)
    assert obs == (
        f"{HOUSE} You are in the kitchen. You notice pancake and microwave. Currently, you are "
        "not grabbing anything in hand. The pancake and the microwave are not close to you. The "
        "microwave is not opened.\nAvailable actions:\n- walk to the living room\n"
        "- walk to the bathroom\n- walk to the bedroom\n- walk to the pancake\n"
        "- walk to the microwave\n"
        "In order to heat up the pancake in the microwave, your next step is to"
    )
    assert (
        info["valid_actions"] == parse_actions(obs)
        and info["target"] == "pancake" == env.targets[0]
    )


def test_food_best_plan_is_6_actions_and_only_completion_pays():
    env = envs.make(FP)
    env.reset()
    out = run(env, FOOD_PLAN)
    assert [r for _, r, _, _, _ in out] == [0, 0, 0, 0, 0, 1.0]
    assert [t for _, _, t, _, _ in out] == [False] * 5 + [True] and out[-1][4]["won"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("walk to the kitchen")


@pytest.mark.parametrize("name", [FP, ENT])
def test_greedy_action_is_always_available(name):
    """In the states a very random policy reaches, the greedy choice is always a listed action."""
    greedy = vh.greedy_food if name == FP else vh.greedy_entertainment
    env, noisy = envs.make(name), envs.scripted_policy(name, seed=1)
    noisy.p_random = 0.8
    for _ in range(150):
        obs, done = env.reset()[0], False
        while not done:
            assert greedy(obs) in parse_actions(obs), obs
            obs, _, term, trunc, _ = env.step(noisy(obs))
            done = term or trunc


def test_putting_into_a_closed_microwave_fails_and_closing_it_empty_pays_nothing():
    env = envs.make(FP)
    env.reset()
    out = run(
        env,
        [
            "walk to the pancake",
            "grab the pancake",
            "walk to the microwave",
            "put the pancake in the microwave",
            "close the microwave",
        ],
    )
    assert all(r == 0 and not info["invalid"] for _, r, _, _, info in out)
    assert env.task.holding and not env.task.inside and not env.done
    assert "Currently, you have grabbed the pancake in hand." in env.obs


def test_partial_view_other_rooms_show_nothing():
    env = envs.make(FP)
    env.reset()
    obs = run(env, ["walk to the pancake", "grab the pancake", "walk to the bedroom"])[-1][0]
    desc = obs.split("\nAvailable")[0]
    assert desc == (
        f"{HOUSE} You are in the bedroom and notice nothing useful. Currently, you have grabbed "
        "the pancake in hand."
    )
    assert parse_actions(obs) == [
        "walk to the living room",
        "walk to the kitchen",
        "walk to the bathroom",
    ]
    assert "microwave" not in desc
    env2 = envs.make(ENT)
    env2.reset()
    run(
        env2,
        [
            "walk to the chips",
            "grab the chips",
            "walk to the living room",
            "walk to the coffee table",
            "put the chips on the coffee table",
            "walk to the kitchen",
        ],
    )
    assert "only notice milk" in env2.obs and "chips" not in env2.obs.split("\nAvailable")[0]


def test_entertainment_best_plan_is_11_actions():
    env = envs.make(ENT)
    obs, _ = env.reset()
    assert parse_actions(obs) == [
        "walk to the living room",
        "walk to the bathroom",
        "walk to the bedroom",
        "walk to the chips",
        "walk to the milk",
    ]
    out = run(env, ENT_PLAN)
    assert [r for _, r, _, _, _ in out] == [0] * 10 + [1.0] and out[-1][4]["won"]
    assert not any(info["invalid"] for *_, info in out)


def test_entertainment_rules_free_hand_for_the_tv_and_no_walking_while_seated():
    env = envs.make(ENT)
    env.reset()
    run(env, ENT_PLAN[:5] + ["walk to the TV"])
    assert "turn on the TV" not in env.actions  # both hands full
    _, r, _, _, info = env.step("turn on the TV")
    assert info["invalid"] and r == pytest.approx(-0.1)
    env.reset()  # seated without the milk: not done; walking fails, standing up is offered
    run(
        env,
        [
            "walk to the chips",
            "grab the chips",
            "walk to the living room",
            "walk to the TV",
            "turn on the TV",
            "walk to the sofa",
            "sit on the sofa",
        ],
    )
    assert not env.done and "You are sitting on the sofa." in env.obs
    assert "stand up from the sofa" in env.actions
    run(env, ["walk to the kitchen"])
    assert env.task.room == "living room" and env.task.sitting
    run(env, ["stand up from the sofa", "walk to the kitchen"])
    assert env.task.room == "kitchen"
    env.reset()  # at the switched-off TV with empty hands it can be switched on (a reference bug)
    run(env, ["walk to the living room", "walk to the TV"])
    assert "turn on the TV" in env.actions


@pytest.mark.parametrize(
    "variant, plan_words",
    [
        ("hamburger", ("hamburger", "microwave")),
        ("pizza", ("pizza", "microwave")),
        ("cheese", ("cheese", "microwave")),
        ("apple pie", ("apple pie", "microwave")),
        ("dishes", ("dishes", "dishwasher")),
        ("clothes", ("clothes", "washing machine")),
    ],
)
def test_variants_rename_the_task_and_the_optimal_policy_follows(variant, plan_words):
    obj, app = plan_words
    env = envs.make(FP, variant=variant)
    obs, info = env.reset()
    assert info["target"] == variant and env.targets == [variant]
    assert f"walk to the {obj}" in parse_actions(obs) and f"walk to the {app}" in parse_actions(obs)
    verb = "wash" if app != "microwave" else "heat up"
    assert obs.endswith(f"In order to {verb} the {obj} in the {app}, your next step is to")
    assert "pancake" not in obs
    plan = [a.replace("pancake", obj).replace("microwave", app) for a in FOOD_PLAN]
    out = run(env, plan)
    assert out[-1][1] == 1.0 and out[-1][4]["won"]
    policy = envs.scripted_policy(FP, mode="optimal")  # reads the names off the observation
    obs, _ = env.reset()
    for t in range(6):
        obs, r, term, _, _ = env.step(policy(obs))
    assert term and r == 1.0
    if variant in ("dishes", "clothes"):
        assert f"The {obj} are in the {app}." in obs


@pytest.mark.parametrize(
    "bad", ["", "x" * 10_000, "grab the microwave", "open the fridge", "🥞", "walk to the kitchen"]
)  # already in the kitchen: not available
def test_invalid_actions_cost_and_change_nothing(bad):
    env = envs.make(FP)
    obs, _ = env.reset()
    obs2, r, term, trunc, info = env.step(bad)
    assert obs2 == obs and r == pytest.approx(-0.1) and info["invalid"] and not (term or trunc)
    assert env.step(None)[4]["invalid"]


def test_action_normalisation():
    env = envs.make(ENT)
    env.reset()
    for a in ["Walk to the CHIPS.", " grab   the chips!", "walk to the living-room\nthen sit"]:
        assert not env.step(a)[4]["invalid"]
    assert env.task.room == "living room" and env.task.held() == ["chips"]
    env = envs.make(ENT, invalid_penalty=0.0)
    env.reset()
    assert env.step("dance")[1] == 0.0


def test_step_cap_is_50_and_truncates():
    env = envs.make(FP)
    env.reset()
    for t in range(50):
        _, r, term, trunc, info = env.step(
            "walk to the bedroom" if t % 2 == 0 else "walk to the kitchen"
        )
        assert r == 0 and not term and trunc == (t == 49)
    assert info["turn"] == 50 and not info["won"]
    env = envs.make(ENT, max_turns=3)
    env.reset()
    assert [env.step("nonsense")[3] for _ in range(3)] == [False, False, True]


def test_options_and_errors():
    with pytest.raises(ValueError, match="valid variants"):
        envs.make(FP, variant="soup")
    with pytest.raises(ValueError, match="no variants"):
        envs.make(ENT, variant="pizza")
    with pytest.raises(ValueError, match="valid options"):
        envs.make(ENT, colour="red")
    env = envs.make(FP)
    with pytest.raises(ValueError, match="valid targets"):
        env.reset(options={"target": "pizza"})
    assert envs.make(ENT).reset(options={"target": "entertainment"})[1]["target"] == "entertainment"


@pytest.mark.parametrize("name", [FP, ENT])
def test_determinism_and_room_for_rl(name):
    a = envs.collect_scripted(name, 300, seed=3)
    assert a == envs.collect_scripted(name, 300, seed=3)
    assert a != envs.collect_scripted(name, 300, seed=4)
    weak, best = envs.summarize(a), envs.summarize(envs.collect_scripted(name, 3, mode="optimal"))
    assert best["success_rate"] == 1.0 and best["mean_return"] == 1.0
    assert best["mean_turns"] == (6 if name == FP else 11)
    assert 0.6 < weak["success_rate"] < 1.0 and weak["mean_turns"] > 2 * best["mean_turns"]


def test_dataset_round_trip(tmp_path):
    trajs = envs.collect_scripted(ENT, 10, seed=2)
    path = tmp_path / "vh.jsonl"
    envs.save_dataset(str(path), trajs)
    assert envs.load_dataset(str(path), env=ENT) == trajs
    from envs.collect import main

    s = main(
        ["--env", FP, "--episodes", "30", "--mode", "optimal", "--out", str(tmp_path / "fp.jsonl")]
    )
    assert s["success_rate"] == 1.0 and s["mean_turns"] == 6


def test_make_vec_matches_single_envs():
    n = 3
    vec = envs.make_vec(ENT, n)
    obs, _ = vec.reset(seed=5)
    singles = [envs.make(ENT) for _ in range(n)]
    for i, e in enumerate(singles):
        e.reset(seed=5 + i)
    pols = [envs.scripted_policy(ENT, seed=i) for i in range(n)]
    finished = [False] * n
    while any(vec.active):
        acts = [pols[i](obs[i]) if vec.active[i] else "" for i in range(n)]
        obs, rewards, dones, infos = vec.step(acts)
        for i, e in enumerate(singles):
            if not finished[i]:
                o, r, term, trunc, _ = e.step(acts[i])
                assert (o, r, term or trunc) == (obs[i], rewards[i], dones[i])
                finished[i] = term or trunc


def test_corpus_covers_both_tasks_and_variants():
    texts = envs.corpus(FP, 40)
    assert len(texts) == 40
    assert any("enjoy the chips" in t for t in texts) and any("washing machine" in t for t in texts)
    assert "grab the pancake" in texts
