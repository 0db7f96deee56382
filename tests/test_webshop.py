"""WebShop: reward parts on hand-made cases, page texts, actions, invalid actions, the step cap,
evaluation goals, scripted policies, observation length, datasets (fast), and one learning test
(slow: Q-SFT Table 2 in miniature, ~1 hour)."""

import json
import os
import sys

import pytest

import envs
from envs import webshop as ws

NAME = "webshop"


def product(**kw):
    p = {
        "asin": "B0TEST0001",
        "category": "beauty",
        "query": "conditioner",
        "product_category": "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › "
        "Conditioners",
        "Title": "Viori Rice Water Conditioner - Natural Ingredients",
        "nouns": ["viori", "rice", "water", "conditioner"],
        "price": 16.25,
        "Attributes": ["natural ingredients", "sulfate free", "cruelty free", "vegan"],
        "options": {"scent": ["citrus yao", "lavender"], "size": ["8 fl oz", "16 fl oz"]},
        "Description": "A conditioner bar for every day.",
        "BulletPoints": ["Travel size: made to be travel size."],
    }
    return {**p, **kw}


def goal(**kw):
    g = {
        "query": "conditioner",
        "product_category": product()["product_category"],
        "nouns": ["viori", "rice", "water", "conditioner"],
        "attributes": ["natural ingredients", "paraben free"],
        "goal_options": {"scent": "citrus yao", "size": "16 fl oz"},
        "price_upper": 50.0,
    }
    return {**g, **kw}


# --- reward parts --------------------------------------------------------------------------------
def test_type_reward_levels():
    t = ws.type_reward(product(), goal())
    assert t == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1.0}
    # another type in the same category path, sharing one of four nouns: category match -> 1
    other = product(query="shampoo", nouns=["zenka", "rice", "shampoo"])
    other["product_category"] = "Beauty & Personal Care › Hair Care › Shampoos"
    assert ws.type_reward(other, goal())["r_type"] == 1.0
    # nothing matches but 1 of 4 nouns (0.25 > 0.2): still 1
    far = product(query="hdmi cable", product_category="Electronics › Cables", nouns=["rice"])
    assert ws.type_reward(far, goal())["r_type"] == 1.0
    # 1 of 5 nouns (0.2, not > 0.2) and no query / category match: 0.5
    g5 = goal(nouns=["viori", "rice", "water", "conditioner", "bar"])
    assert ws.type_reward(far, g5) == {
        "r_type": 0.5,
        "query_match": False,
        "category_match": False,
        "title_score": 0.2,
    }
    # under 10% of the nouns: 0.1, even with a query match; none: 0
    g11 = goal(nouns=["rice"] + [f"n{i}" for i in range(10)])
    assert ws.type_reward(far, g11)["r_type"] == 0.1
    assert ws.type_reward(product(nouns=["zenka"]), goal())["r_type"] == 0.0
    # one shared category level is not a category match
    one = product(query="x", product_category="Beauty & Personal Care › Makeup", nouns=[])
    assert not ws.type_reward(one, goal())["category_match"]


def test_attribute_matches_fuzzy_and_in_text():
    p = product()
    assert ws.attribute_matches(p, ["natural ingredients"]) == 1
    assert ws.attribute_matches(p, ["Natural-Ingredients!"]) == 1  # normalised text
    assert ws.attribute_matches(p, ["ingredients natural"]) == 1  # token set
    assert ws.attribute_matches(p, ["travel size"]) == 1  # not listed, but in the features
    assert ws.attribute_matches(p, ["paraben free", "long lasting"]) == 0
    assert ws.attribute_matches(p, ["sulfate free", "vegan", "gluten free"]) == 2


def test_option_matches_sizes_exact_colours_normalised():
    p = product()
    goal_opts = ["citrus yao", "16 fl oz"]
    assert ws.option_matches(p, goal_opts, {"scent": "citrus yao", "size": "16 fl oz"}) == 2
    assert ws.option_matches(p, goal_opts, {"scent": "Citrus  Yao", "size": "8 fl oz"}) == 1
    assert ws.option_matches(p, goal_opts, {"size": "16 fl oz (pack of 2)"}) == 0  # size: exact
    assert ws.option_matches(p, goal_opts, {}) == 0  # nothing chosen
    # colours compare through their base colour (WebShop's normalize_color)
    assert ws.normalize_color("navy blue") == "blue" and ws.normalize_color("citrus") == "citrus"
    assert ws.option_matches(p, ["light blue"], {"color": "navy blue"}) == 1
    assert ws.option_matches(p, ["red"], {"color": "navy blue"}) == 0
    # an unmatched choice whose text is in the description still counts (the reference's rule)
    assert ws.option_matches(p, ["lavender"], {"style": "bar"}) == 1


def test_reward_formula():
    p, g = product(), goal()
    full = ws.reward_parts(p, g, {"scent": "citrus yao", "size": "16 fl oz"})
    # attributes 1/2 (no "paraben free"), options 2/2, price 1: (1 + 2 + 1) / (2 + 2 + 1)
    assert full["reward"] == pytest.approx(4 / 5) and full["r_att"] == 0.5
    assert full["r_option"] == 1.0 and full["r_price"] is True and full["r_type"] == 1.0
    cheap = ws.reward_parts(p, goal(price_upper=10.0), {})
    assert cheap["reward"] == pytest.approx(1 / 5) and cheap["r_price"] is False
    half = ws.reward_parts(
        product(query="x", product_category="Other › A", nouns=["rice"]),
        goal(nouns=["viori", "rice", "water", "conditioner", "bar"]),
        {},
    )
    assert half["r_type"] == 0.5 and half["reward"] == pytest.approx(0.5 * 2 / 5)
    assert ws.reward_parts(p, goal(attributes=["natural ingredients"], goal_options={}), {})[
        "reward"
    ] == pytest.approx(1.0)


# --- pages and actions ---------------------------------------------------------------------------
def first_result(env):
    return ws.results_of(env.render())[0][0]


def test_pages_follow_the_reference_texts():
    env = envs.make(NAME)
    obs, info = env.reset(options={"target": "2000"})
    instr = env.goal["instruction_text"]
    assert obs == f"Observation:\nWebShop\nInstruction:\n{instr}\n[Search]\nInstruction:\n{instr}"
    assert info == {
        "target": "2000",
        "won": False,
        "invalid": False,
        "turn": 0,
        "page": "search",
        "asin": None,
        "options": {},
        "anchor": f"WebShop\nInstruction:\n{instr}\n[Search]",  # the page: the state (GiGPO)
    }
    assert ", and price lower than " in instr and instr.endswith("0 dollars")
    obs, r, term, trunc, info = env.step("search[" + " ".join(ws.goal_words(instr)) + "]")
    page = env.render()
    lines = page.split("\n")
    assert lines[:3] == ["[Back to Search]", "Page 1 (Total results: 50)", "[Next >]"]
    assert len(ws.results_of(page)) == 10 and len(lines) == 3 + 2 * 10
    assert obs.endswith(f"Observation:\n{page}\nInstruction:\n{instr}") and r == 0
    assert "Action:\nsearch[" in obs
    asin = first_result(env)
    env.step(f"click[{asin}]")
    p = env.data["by_asin"][asin]
    item = env.render().split("\n")
    assert item[:2] == ["[Back to Search]", "[< Prev]"]
    assert item[2 + len(p["options"]) :] == [
        p["Title"],
        f"Price: ${p['price']:.2f}",
        "Rating: N.A.",
        "[Description]",
        "[Features]",
        "[Reviews]",
        "[Attributes]",
        "[Buy Now]",
    ]
    group, values = next(iter(p["options"].items()))
    assert item[2] == f"{group} " + "".join(f"[{v}]" for v in values)
    obs, *_, info = env.step(f"click[{values[-1]}]")
    assert obs.split("Observation:\n")[-1].startswith(f"You have clicked {values[-1]}.\n")
    assert f"[[{values[-1]}]]" in env.render() and info["options"] == {group: values[-1]}
    obs, r, term, trunc, info = env.step("click[Buy Now]")
    assert (
        term
        and not trunc
        and obs.split("Observation:\n")[-1].startswith(f"Your score (min 0.0, max 1.0): {r:.2f}")
    )
    assert {"r_type", "r_att", "r_option", "r_price", "title_score"} <= set(info)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("click[Buy Now]")


def test_navigation_next_prev_subpages_back_and_case():
    env = envs.make(NAME, max_turns=50)
    env.reset(seed=4)
    env.step("SEARCH[ Conditioner  natural ]")
    first = first_result(env)
    env.step("click[Next >]")
    assert env.render().split("\n")[1:4] == ["Page 2 (Total results: 50)", "[< Prev]", "[Next >]"]
    assert first_result(env) != first
    env.step("click[< prev]")
    assert env.page_num == 1 and first_result(env) == first
    env.step(f"click[{first.lower()}]")  # clicks are case-insensitive
    assert env.page == "item" and env.asin == first
    for sub, text in [
        ("Features", env.data["by_asin"][first]["BulletPoints"][0]),
        ("attributes", env.data["by_asin"][first]["Attributes"][0]),
        ("Description", "for every day"),
        ("Reviews", "No reviews yet."),
    ]:
        env.step(f"click[{sub}]")
        assert env.page == "sub" and text in env.render()
        env.step("click[< Prev]")
        assert env.page == "item"
    env.step("click[< Prev]")
    assert env.page == "results" and env.asin is None
    for _ in range(4):
        env.step("click[Next >]")
    assert env.page_num == 5 and "[Next >]" not in env.render()
    assert env.step("click[Next >]")[4]["invalid"]  # no 6th page
    env.step("click[Back to Search]")
    assert env.page == "search" and env.render().startswith("WebShop\nInstruction:")


def test_anchor_is_the_page_without_the_history():
    """info["anchor"] (GiGPO's anchor state) is the current page, whatever led there: an invalid
    action keeps it, Back to Search returns to the start's, an option click shows the item page
    (not the "You have clicked" message); a subpage, which does not show the options chosen, adds
    them."""
    env = envs.make(NAME, max_turns=50)
    _, info = env.reset(seed=4)
    start = info["anchor"]
    results = env.step("search[conditioner natural]")[4]["anchor"]
    assert results == env.render() != start
    assert env.step("click[no such button]")[4]["anchor"] == results  # invalid: same state
    asin = first_result(env)
    item = env.step(f"click[{asin}]")[4]["anchor"]
    plain = env.step("click[Description]")[4]["anchor"]
    assert plain == env.render() + "\n[]" and env.step("click[< Prev]")[4]["anchor"] == item
    assert env.step("click[Back to Search]")[4]["anchor"] == start
    assert env.step("search[conditioner natural]")[4]["anchor"] == results
    env.step(f"click[{asin}]")
    group, values = next(iter(env.data["by_asin"][asin]["options"].items()))
    chosen = env.step(f"click[{values[0]}]")[4]["anchor"]
    assert chosen == env.render() != item and "You have clicked" not in chosen
    sub = env.step("click[Description]")[4]["anchor"]
    assert sub.startswith(plain[: -len("\n[]")]) and sub != plain
    assert sub.endswith(f"\n[('{group}', '{values[0]}')]")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "hello",
        "x" * 10_000,
        "click[]",
        "search[]",
        "click[Add to Cart]",
        "buy now",
        "search[a the]",
        "click[lavender]",
        "click[Buy Now]",
        "🛒",
        "search[tea]\nclick[Buy Now]x",
    ],
)
def test_invalid_actions_change_nothing(bad):
    env = envs.make(NAME)
    env.reset(seed=1)
    env.step("search[tea]")
    if bad.startswith("search[tea]"):
        bad = "search[tea"  # from a results page any search is invalid; this one is also broken
    before = (env.page, env.page_num, env.asin, dict(env.chosen))
    obs, r, term, trunc, info = env.step(bad)
    assert info["invalid"] and r == 0 and not (term or trunc)
    assert (env.page, env.page_num, env.asin, dict(env.chosen)) == before
    assert obs.split("Observation:\n")[-1].startswith("Invalid action!\nInstruction:")
    assert len(obs) < 1000 + 200  # a long action is cut in the transcript
    assert env.step(None)[4]["invalid"]  # not even a str: invalid, no exception


def test_search_only_from_the_search_page_and_deterministic_results():
    env = envs.make(NAME)
    env.reset(seed=2)
    env.step("search[gluten free herbal tea]")
    page = env.render()
    assert env.step("search[coffee]")[4]["invalid"] and env.render() == page
    again = envs.make(NAME)
    again.reset(seed=9)
    again.step("search[Gluten free, herbal TEA!]")
    assert again.render() == page  # same words, same results
    top = [env.data["by_asin"][a] for a, _, _ in ws.results_of(page)]
    assert all(p["query"] == "herbal tea" for p in top[:5])
    assert ws.catalogue()["search"].top("zzzz qqqq") == ()
    env.reset(seed=2)
    env.step("search[zzzz qqqq]")
    assert env.render() == "[Back to Search]\nPage 1 (Total results: 0)"


def test_step_cap_is_10_and_truncates():
    env = envs.make(NAME)
    env.reset(seed=3)
    for t in range(10):
        _, r, term, trunc, info = env.step("click[nothing]")
        assert r == 0 and not term and trunc == (t == 9)
    assert info["turn"] == 10 and not info["won"] and "r_type" not in info
    env = envs.make(NAME, max_turns=2)
    env.reset()
    assert [env.step("x")[3] for _ in range(2)] == [False, True]
    with pytest.raises(ValueError, match="valid options"):
        envs.make(NAME, colour="red")


def test_catalogue_goals_and_the_evaluation_split():
    data = ws.catalogue()
    products, goals = data["products"], data["goals"]
    assert len(products) == 3000 and len({p["asin"] for p in products}) == 3000
    assert {p["category"] for p in products} == set(ws.CATEGORIES)
    assert len({p["query"] for p in products}) == 30
    assert all(len(p["asin"]) == 10 and p["asin"].startswith("B0") for p in products)
    for g in goals[:200]:
        p = data["by_asin"][g["asin"]]
        assert set(g["attributes"]) <= set(p["Attributes"]) and 1 <= len(g["attributes"]) <= 3
        assert all(v in p["options"][k] for k, v in g["goal_options"].items())
        above = [x for x in ws.PRICE_RANGE if x > p["price"]][:4]
        assert g["price_upper"] in above[1:]
        assert ws.reward_parts(p, g, g["goal_options"])["reward"] == 1.0  # the goal's product
    env = envs.make(NAME)
    assert env.targets == [str(i) for i in range(2000, 2100)]
    drawn = {env.reset(seed=s)[1]["target"] for s in range(3000)}
    assert not drawn & set(env.targets) and len(drawn) > 1500
    assert env.reset(options={"target": "2042"})[1]["target"] == "2042"
    with pytest.raises(ValueError, match="goal ids"):
        env.reset(options={"target": "3000"})


# --- scripted policies, data, observation length -------------------------------------------------
def test_scripted_policies_mean_rewards():
    """Measured on 1,000 episodes (seed 0): suboptimal 0.53 (success 0.06, 4.8 actions), expert
    0.92 (success 0.69, 4.5 actions); the papers' data policies score 0.5-0.55."""
    weak = envs.summarize(envs.collect_scripted(NAME, 200, seed=0))
    best = envs.summarize(envs.collect_scripted(NAME, 200, seed=0, mode="expert"))
    assert 0.45 < weak["mean_return"] < 0.6 and weak["success_rate"] < 0.15
    assert best["mean_return"] > 0.85 and best["success_rate"] > 0.55
    assert best["mean_turns"] < 6 and weak["mean_turns"] < 6
    assert envs.collect_scripted(NAME, 20, seed=5) == envs.collect_scripted(NAME, 20, seed=5)
    with pytest.raises(ValueError, match="mode"):
        envs.scripted_policy(NAME, mode="optimal")


def test_observations_fit_the_scripts_token_budget():
    """Every observation of both policies fits 448 tokens of the tiny tokenizer the scripts train
    on envs.corpus (measured: at most 385 tokens, actions 31), so left truncation never cuts the
    current page."""
    from filtered_bc import train_tiny_tokenizer

    tok = train_tiny_tokenizer(envs.corpus(NAME, 3000))
    longest, longest_action = 0, 0
    for mode in ws.MODES:
        for t in envs.collect_scripted(NAME, 60, seed=11, mode=mode):
            for s in t["steps"]:
                longest = max(longest, len(tok(s["observation"])["input_ids"]))
                longest_action = max(longest_action, len(tok(s["action"] + "\n")["input_ids"]))
    assert 300 < longest <= 448 and longest_action <= 32


def test_dataset_round_trip_and_collect(tmp_path):
    trajs = envs.collect_scripted(NAME, 10, seed=2)
    path = tmp_path / "ws.jsonl"
    envs.save_dataset(str(path), trajs)
    assert envs.load_dataset(str(path), env=NAME) == trajs
    assert all(t["steps"][-1]["action"] == "click[Buy Now]" or len(t["steps"]) == 10 for t in trajs)
    from envs.collect import main

    s = main(
        ["--env", NAME, "--episodes", "20", "--mode", "expert", "--out", str(tmp_path / "e.jsonl")]
    )
    assert s["mean_return"] > 0.7


def test_corpus_covers_the_pages():
    texts = envs.corpus(NAME, 60)
    assert len(texts) == 60
    joined = "\n".join(texts)
    for piece in [
        "WebShop\nInstruction:",
        "Page 1 (Total results: 50)",
        "[Buy Now]",
        "Rating: N.A.",
        "Your score (min 0.0, max 1.0):",
        "You have clicked",
        "search[",
        "click[",
    ]:
        assert piece in joined, piece


@pytest.mark.slow  # ~1 hour at one torch thread: the SFT start is copy pretraining, then BC
def test_learning_qsft_beats_the_sft_of_the_suboptimal_data(tmp_path, one_torch_thread):
    """Q-SFT Table 2 in miniature (docs/benchmark.md, "WebShop"; issue 55):
    a rotary tiny actor with the words split, copy-pretrained 2,500 steps (benchmark/
    tokenizer_copy.py), then BC on 3,000 sub-optimal episodes, 2,000 steps × 16: the SFT policy.
    Q-SFT from it (π_φ = the SFT actor, 10 × 20 steps) beats it on the 100 evaluation goals,
    paired, by more than 2 s.e. A test of the whole recipe, not of a shortcut: the copy head and
    the BC are what make WebShop learnable for the tiny actor at all (0 valid clicks without).

    Measured (one torch thread each, two runs side by side, 2026-11-29; the copy pretraining there
    unseeded): SFT 0.21 ± 0.03; Q-SFT seed 1 +0.18 ± 0.04, seed 2 +0.14 ± 0.04; offline ArCHer
    −0.02 / +0.03 (20 + 25 + 10 minutes). This test, the same day (beside one or two one-thread
    runs): SFT 0.15 ± 0.03 → Q-SFT 0.29 ± 0.03, +0.14 ± 0.04 (3.5 s.e.), 55.8 minutes."""
    import torch

    import filtered_bc
    import qsft
    from helpers import assert_margin, paired_difference, run_dir

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmark"))
    import tokenizer_copy

    torch.manual_seed(0)
    copy, data = str(tmp_path / "copy"), str(tmp_path / "ws_sub.jsonl")
    flags = ["--write-actor", copy, "--positions", "rotary", "--copy-steps", "2500"]
    tokenizer_copy.main(["--envs", NAME, *flags])
    envs.save_dataset(data, envs.collect_scripted(NAME, 3000, seed=0))  # python -m envs.collect
    common = dict(env=NAME, dataset=data, eval_episodes=100, eval_every=0, max_obs_tokens=480)
    common.update(torch_threads=1, checkpoint_every=0, device="cpu", seed=1)
    filtered_bc.main(
        filtered_bc.Args(
            actor=copy,
            iterations=0,
            offline_rho=1.0,
            offline_steps=2000,
            batch_size=16,
            save_model=True,
            output_dir=str(tmp_path / "sft"),
            **common,
        )
    )
    sft = str(run_dir(tmp_path / "sft") / "actor")
    qsft.main(
        qsft.Args(
            actor=sft,
            behavior_policy=sft,
            iterations=10,
            updates_per_iter=20,
            output_dir=str(tmp_path / "qsft"),
            **common,
        )
    )
    summary = json.loads((run_dir(tmp_path / "qsft") / "summary.json").read_text())
    diff, se = paired_difference(summary["eval_returns"], summary["start_eval_returns"])
    assert_margin(diff, se, 2, (summary["start_eval_return"], summary["eval_return"], diff, se))
