"""Twenty Questions: knowledge base, oracle, win check, question banks, env rules (fast, CPU
only)."""

import random
from collections import Counter

import pytest

from envs import twenty_questions as tq
from envs.core import HEADER, mentions

YES, NO, INV = "Yes.", "No.", "Invalid Question."


# --- knowledge base -----------------------------------------------------------------------------
def test_counts_and_categories():
    assert len(tq.TARGETS) == 157 == len(set(tq.TARGETS)) == len(tq.KB)
    assert set(tq.KB) == set(tq.TARGETS)
    counts = Counter(tq.KB[t]["category"] for t in tq.TARGETS)
    assert counts == {
        "Sports": 10,
        "Animals": 10,
        "Fruits": 10,
        "Vehicles": 10,
        "Clothes": 11,
        "Electronics": 10,
        "Musical Instruments": 10,
        "Furniture": 10,
        "Office Supplies": 14,
        "Vegetables": 10,
        "Art": 7,
        "Kitchen Tools": 10,
        "Nature": 11,
        "Toys": 4,
        "Jewelry": 9,
        "Garden Supplies": 5,
        "Tools": 6,
    }
    assert tq.SUBSET == [
        "football",
        "dog",
        "banana",
        "truck",
        "pants",
        "computer",
        "piano",
        "chair",
        "pen",
        "scissors",
    ]
    assert all(w in tq.TARGETS for w in tq.SUBSET)
    assert sum(" " in t for t in tq.TARGETS) >= 10  # multi-word objects
    assert {"tennis racket", "teddy bear"} <= set(tq.TARGETS)


def test_attributes_identical_keys_and_boolean():
    keys = set(tq.KB[tq.TARGETS[0]]["attrs"])
    assert keys == set(tq.ATTRIBUTES) and len(keys) >= 40
    for t in tq.TARGETS:
        entry = tq.KB[t]
        assert set(entry) == {"category", "variants", "attrs"}
        assert set(entry["attrs"]) == keys, t
        assert all(isinstance(v, bool) for v in entry["attrs"].values()), t
        assert isinstance(entry["variants"], list)
    for k in keys:  # every attribute separates some objects
        assert len({tq.KB[t]["attrs"][k] for t in tq.TARGETS}) == 2, k


@pytest.mark.parametrize(
    "obj,attr,value",
    [
        ("banana", "edible", True),
        ("banana", "fruit", True),
        ("banana", "living", True),
        ("banana", "plant", True),
        ("dog", "mammal", True),
        ("dog", "pet", True),
        ("truck", "has_wheels", True),
        ("truck", "electronic", False),
        ("pants", "wearable", True),
        ("computer", "has_screen", True),
        ("piano", "musical_instrument", True),
        ("chair", "furniture", True),
        ("pen", "used_for_writing", True),
        ("scissors", "sharp", True),
        ("football", "ball", True),
        ("rock", "living", False),
        ("mushroom", "plant", False),
        ("mushroom", "edible", True),
        ("tomato", "vegetable", True),
        ("tomato", "fruit", False),
        ("lemon", "citrus", True),
        ("lemon", "sweet", False),
        ("elephant", "bigger_than_person", True),
        ("ring", "fits_in_pocket", True),
        ("toaster", "needs_power", True),
    ],
)
def test_kb_values(obj, attr, value):
    assert tq.KB[obj]["attrs"][attr] is value


def test_names_are_not_sub_phrases_of_other_objects():
    # no name/variant of one object occurs (as whole words) inside a name/variant of another object
    for b in tq.TARGETS:
        for pb in tq.names_of(b):
            assert tq._mentioned_objects(pb) == {b}, pb


# --- the oracle -----------------------------------------------------------------------------------
ORACLE_CASES = [
    # living / natural / man-made
    ("dog", "Is it alive?", YES),
    ("dog", "Is it a living thing?", YES),
    ("banana", "Is it a living thing?", YES),
    ("banana", "Is it alive?", YES),
    ("rock", "Is it alive?", NO),
    ("computer", "Is it a living thing?", NO),
    ("truck", "Is it a man-made object?", YES),
    ("tree", "Is the object man-made?", NO),
    ("mountain", "Is it found in nature?", YES),
    ("chair", "Is it natural?", NO),
    ("rock", "Is it non-living?", YES),
    ("dog", "Is it an inanimate object?", NO),
    # animals and plants
    ("dog", "Is it an animal?", YES),
    ("banana", "Is it an animal?", NO),
    ("cat", "Is it a mammal?", YES),
    ("parrot", "Is it a mammal?", NO),
    ("parrot", "Is it a bird?", YES),
    ("goldfish", "Is it a fish?", YES),
    ("hamster", "Is it a pet?", YES),
    ("giraffe", "Is it a pet?", NO),
    ("tree", "Is the object a plant?", YES),
    ("dog", "Is the object a plant?", NO),
    ("horse", "Is it a big animal?", YES),
    ("cat", "Is it a big animal?", NO),
    # food
    ("banana", "Can you eat it?", YES),
    ("banana", "Is it edible?", YES),
    ("carrot", "Is it food?", YES),
    ("pen", "Can you eat it?", NO),
    ("apple", "Is it a kind of fruit?", YES),
    ("potato", "Is it a fruit?", NO),
    ("broccoli", "Is it a vegetable?", YES),
    ("orange", "Is it a citrus fruit?", YES),
    ("apple", "Is it a citrus fruit?", NO),
    ("strawberry", "Is it a berry?", YES),
    ("carrot", "Does it grow underground?", YES),
    ("banana", "Does it grow underground?", NO),
    ("hat", "Do you wear it on your head?", YES),
    ("shoes", "Is it worn on the head?", NO),
    ("carrot", "Is it a fruit or a vegetable?", YES),
    ("dog", "Is it a fruit or a vegetable?", NO),
    # vehicles
    ("truck", "Does it have wheels?", YES),
    ("boat", "Does it have wheels?", NO),
    ("truck", "Is it a vehicle?", YES),
    ("bicycle", "Is it a means of transportation?", YES),
    ("airplane", "Can it fly?", YES),
    ("bicycle", "Does it have an engine?", NO),
    ("horse", "Can you ride it?", YES),
    # wearing
    ("pants", "Is it something you wear?", YES),
    ("pants", "Is it a piece of clothing?", YES),
    ("necklace", "Is it a piece of clothing?", NO),
    ("necklace", "Is it jewelry?", YES),
    ("ring", "Is it jewellery?", YES),
    ("headphones", "Can you wear it?", YES),
    ("sofa", "Can you wear it?", NO),
    # electronics
    ("computer", "Is it electronic?", YES),
    ("computer", "Does it need electricity?", YES),
    ("car", "Does it need electricity?", NO),
    ("cell phone", "Does it have a screen?", YES),
    ("radio", "Does it have a screen?", NO),
    ("drill", "Does it use batteries or electricity?", YES),
    # music, furniture, sports, toys, tools
    ("piano", "Is it a musical instrument?", YES),
    ("violin", "Is it a stringed instrument?", YES),
    ("trumpet", "Is it a stringed instrument?", NO),
    ("flute", "Is it a wind instrument?", YES),
    ("chair", "Is it furniture?", YES),
    ("chair", "Is it a piece of furniture?", YES),
    ("bed", "Can you sit on it?", YES),
    ("desk", "Is it furniture?", YES),
    ("football", "Is it used for sports?", YES),
    ("football", "Is it sports equipment?", YES),
    ("piano", "Is it used for sports?", NO),
    ("basketball", "Is it a ball?", YES),
    ("kite", "Is it a toy?", YES),
    ("hammer", "Is it a tool?", YES),
    ("shovel", "Is it a garden tool?", YES),
    ("hammer", "Is it a garden tool?", NO),
    ("hammer", "Is it in the tools category?", YES),
    ("knife", "Is it in the tools category?", NO),
    # materials, size, places
    ("golf club", "Is it made of metal?", YES),
    ("pencil", "Is it made of metal?", NO),
    ("pencil", "Is it made of wood?", YES),
    ("envelope", "Is it made of paper?", YES),
    ("elephant", "Is it bigger than a person?", YES),
    ("pen", "Is it bigger than a person?", NO),
    ("dog", "Is it smaller than a human?", YES),
    ("pen", "Can it fit in your pocket?", YES),
    ("piano", "Can it fit in your pocket?", NO),
    ("piano", "Is it heavy?", YES),
    ("pen", "Is it heavy?", NO),
    ("spatula", "Is it used in the kitchen?", YES),
    ("frying pan", "Is it used for cooking?", YES),
    ("stapler", "Is it an office supply?", YES),
    ("computer", "Is it an office supply?", NO),
    ("computer", "Is it used in an office?", YES),
    ("rake", "Is it used in the garden?", YES),
    ("car", "Is it used outdoors?", YES),
    ("sofa", "Is it found in a house?", YES),
    ("knife", "Is it sharp?", YES),
    ("spoon", "Is it sharp?", NO),
    ("pen", "Is it used for writing?", YES),
    ("easel", "Is it used for art?", YES),
    ("orange", "Is it round?", YES),
    ("teddy bear", "Is it soft?", YES),
    ("hammer", "Is it hard?", YES),
    ("teddy bear", "Is it hard?", NO),
    ("chair", "Does it have legs?", YES),
    ("truck", "Can it move on its own?", YES),
    ("chair", "Can it move on its own?", NO),
    # constants
    ("dog", "Is it a physical object?", YES),
    ("banana", "Is it an idea?", NO),
    ("pen", "Is it a person?", NO),
    # guesses of other objects and wins
    ("dog", "Is it a cat?", NO),
    ("dog", "Is it a dog?", YES),
    ("dog", "Is it a puppy?", YES),
    ("tennis racket", "Is the object a tennis racket?", YES),
    ("dog", "Is the object a tennis racket?", NO),
    ("pants", "Are they trousers?", YES),
    ("cell phone", "Is it a mobile phone?", YES),
    ("tree", "Does it grow on trees?", YES),
    ("apple", "Does it grow on trees?", NO),  # naming "tree" is a guess
    ("dog", "Is it a fruit, like a banana?", NO),
    # not yes/no, unmodelled or empty
    ("dog", "What color is it?", INV),
    ("dog", "How big is it?", INV),
    ("dog", "Tell me the answer", INV),
    ("dog", "", INV),
    ("dog", "   ", INV),
    ("dog", "asdkjh qwe zzz", INV),
    ("dog", "Where does it live?", INV),
    ("banana", "Is it yellow?", INV),
    ("dog", "Is it a blue thing?", INV),
    ("dog", "Do you know what it is?", INV),
    # wrappers, fillers, negation
    ("dog", "Do you know if it is alive?", YES),
    ("rock", "Do you know if it is alive?", NO),
    ("dog", "Can you tell me whether it is a mammal?", YES),
    ("dog", "OK, is it alive?", YES),
    ("dog", "Tell me, is it an animal?", YES),
    ("dog", "Isn't it alive?", YES),
    ("rock", "Isn't it alive?", NO),
    ("dog", "Is it alive or not?", YES),
    ("dog", "Is it not alive?", NO),
    ("rock", "Is it not alive?", YES),
    ("teddy bear", "Is it not a toy?", NO),
    ("dog", "Is it not a toy?", YES),
    ("ring", "IS IT MADE OF METAL?", YES),
    ("ring", "is it made of metal", YES),
]


def test_oracle_table_is_large():
    assert len(ORACLE_CASES) >= 60
    assert len({t for t, _, _ in ORACLE_CASES}) >= 40


@pytest.mark.parametrize("target,question,expected", ORACLE_CASES)
def test_oracle(target, question, expected):
    assert tq.answer(target, question) == expected


def test_answers_are_exactly_three_strings():
    rng = random.Random(0)
    questions = tq.USEFUL_QUESTIONS + tq.USELESS_QUESTIONS + [q for _, q, _ in ORACLE_CASES]
    for _ in range(500):
        t, q = rng.choice(tq.TARGETS), rng.choice(questions)
        assert tq.answer(t, q) in (YES, NO, INV)


def test_unknown_target_is_an_error():
    with pytest.raises(ValueError, match="valid targets"):
        tq.answer("unicorn", "Is it alive?")


@pytest.mark.parametrize("target", ["dog", "rock", "teddy bear", "banana"])
def test_not_and_know_never_read_as_no(target):
    # "know" is only a wrapper word: the answer is the inner question's
    assert tq.answer(target, "Do you know if it is alive?") == tq.answer(target, "Is it alive?")
    assert tq.answer(target, "Do you know whether it is a toy?") == tq.answer(
        target, "Is it a toy?"
    )
    # "know" alone is not "no": a question that only says "know" is not understood
    assert tq.answer(target, "Do you know?") == INV
    assert tq.answer(target, "Is it something you know?") == INV
    # "not" inverts, it does not mean "no"
    assert tq.answer(target, "Is it not a toy?") != tq.answer(target, "Is it a toy?")
    assert tq.answer(target, "Is it not alive?") != tq.answer(target, "Is it alive?")


# --- winning --------------------------------------------------------------------------------------
def test_every_object_and_variant_is_winnable():
    rng = random.Random(0)
    for t in tq.TARGETS:
        for _ in range(4):
            q = tq.guess_question(t, rng)
            assert tq.is_correct_guess(t, q) and tq.answer(t, q) == YES, (t, q)
            assert tq._mentioned_objects(q) == {t}, q  # it guesses no other object
        for name in tq.names_of(t):
            q = f"Is it a {name}?"
            assert tq.is_correct_guess(t, q) and tq.answer(t, q) == YES, (t, q)
            assert tq.is_correct_guess(t, f"Is the object {name.upper()}?")


@pytest.mark.parametrize(
    "target",
    [
        "tennis racket",
        "teddy bear",
        "paper clip",
        "cell phone",
        "lawn mower",
        "tape measure",
        "watering can",
        "bell pepper",
        "frying pan",
        "yo-yo",
    ],
)
def test_multi_word_objects_need_the_whole_name(target):
    assert tq.is_correct_guess(target, f"Is the object a {target}?")
    last = target.replace("-", " ").split()[-1]
    assert not tq.is_correct_guess(target, f"Is it a {last}?") or last in tq.names_of(target)


def test_guess_articles():
    rng = random.Random(1)
    qs = {tq.guess_question("apple", rng) for _ in range(30)}
    assert all(" an apple?" in q for q in qs)
    qs = {tq.guess_question("banana", rng) for _ in range(30)}
    assert all(" a banana?" in q for q in qs)
    qs = {tq.guess_question("scissors", rng) for _ in range(30)}
    assert all(" a scissors" not in q for q in qs)


def test_fast_mention_index_matches_core_mentions():
    rng = random.Random(2)
    questions = (
        [tq.guess_question(t, rng) for t in tq.TARGETS] + tq.USEFUL_QUESTIONS + tq.USELESS_QUESTIONS
    )
    questions += [n for t in tq.TARGETS for n in tq.names_of(t)]
    questions += [
        "Is it a bus or buses?",
        "Is it a tennis rackets?",
        "Is it a pair of shoes and gloves?",
        "Is it a tennis ball?",
        "Does it grow on trees?",
        "Is it a remote control car?",
    ]
    for q in questions:
        slow = {t for t in tq.TARGETS if any(mentions(q, n) for n in tq.names_of(t))}
        assert tq._mentioned_objects(q) == slow, q


@pytest.mark.parametrize(
    "question",
    [
        "Is it a dog or a cat?",
        "Is it a pair of shoes and gloves?",
        "Is it a dog? Is it a banana? Is it a pen?",
        "Is it a dogIs it a banana",
    ],
)
def test_naming_several_objects_never_wins(question):
    """A policy could otherwise list objects in one utterance and win without asking (a reward hack
    the random tiny actor found at once); such a question is answered "No." for every secret."""
    named = tq._mentioned_objects(question)
    assert len(named) >= 2 or question.endswith("banana")
    for target in tq.TARGETS:
        assert not tq.is_correct_guess(target, question)
        if target in named:
            assert tq.answer(target, question) == "No."


# --- question banks -------------------------------------------------------------------------------
def _all_names():
    return [n for t in tq.TARGETS for n in tq.names_of(t)]


def test_useful_questions_are_informative_yes_no():
    assert 40 <= len(tq.USEFUL_QUESTIONS) <= 60 and len(set(tq.USEFUL_QUESTIONS)) == len(
        tq.USEFUL_QUESTIONS
    )
    names = _all_names()
    for q in tq.USEFUL_QUESTIONS:
        assert q.endswith("?")
        assert not any(mentions(q, n) for n in names), q
        answers = [tq.answer(t, q) for t in tq.TARGETS]
        assert set(answers) == {YES, NO}, (q, Counter(answers))


def test_useless_questions_carry_no_information():
    assert 10 <= len(tq.USELESS_QUESTIONS) <= 15
    names = _all_names()
    kinds = set()
    for q in tq.USELESS_QUESTIONS:
        assert not any(mentions(q, n) for n in names), q
        answers = {tq.answer(t, q) for t in tq.TARGETS}
        assert len(answers) == 1, (q, answers)
        kinds |= answers
    assert INV in kinds and (kinds & {YES, NO})


# --- LLM oracle helpers ---------------------------------------------------------------------------
def test_llm_prompt_format():
    p = tq.llm_prompt("dog", "Is it alive?")
    assert p.startswith("You are playing a game called twenty questions with me.")
    assert (
        'Now the hidden word given to you is "dog", and the question for the current round is '
        '"Is it alive?".' in p
    )
    assert p.endswith("Your response is:")
    assert (
        'you should answer "Invalid Question.". For any valid question, you should answer either '
        '"Yes." or "No.".' in p
    )


@pytest.mark.parametrize(
    "target,question,raw,expected",
    [
        ("dog", "Is it alive?", "Yes.", YES),
        ("dog", "Is it alive?", "yes", YES),
        ("dog", "Is it alive?", "No.", NO),
        ("dog", "Is it alive?", "no, it is not", NO),
        ("dog", "Is it alive?", "Invalid Question.", INV),
        ("dog", "Is it alive?", "I don't know", INV),
        ("dog", "Is it alive?", "It is not known", INV),
        ("dog", "Is it alive?", "", INV),
        ("dog", "Is it alive?", "Nothing", INV),
        ("dog", "Is it alive?", "YES!", YES),
        ("dog", "Is it alive?", "Yes, but no", YES),
        ("dog", "Is it a dog?", "No.", YES),
        ("dog", "Is it a cat?", "Yes.", YES),
        ("tennis racket", "Is it a tennis racket?", "Invalid Question.", YES),
    ],
)
def test_llm_postprocess(target, question, raw, expected):
    assert tq.llm_postprocess(target, question, raw) == expected


# --- the environment ------------------------------------------------------------------------------
def test_env_rewards_and_observation():
    env = tq.make()
    assert env.name == "twenty_questions" and len(env.targets) == 157
    obs, info = env.reset(options={"target": "dog"})
    assert obs == HEADER and info["target"] == "dog"
    obs, r, term, trunc, info = env.step("Is it a plant?")
    assert r == -1.0 and not term and not trunc and not info["won"]
    assert obs == "Questions:\nIs it a plant? No.\n"
    obs, r, term, trunc, info = env.step("Is it an animal?")
    assert obs.endswith("Is it an animal? Yes.\n") and r == -1.0
    obs, r, term, trunc, info = env.step("Is it a dog?")
    assert r == 0.0 and term and info["won"] and obs.endswith("Is it a dog? Yes.\n")


def test_env_multi_word_win():
    env = tq.make(targets=["tennis racket"])
    env.reset()
    _, r, term, _, info = env.step("Is the object a tennis racket?")
    assert r == 0.0 and term and info["won"]


def test_twenty_wrong_questions_end_with_minus_twenty():
    env = tq.make(targets=tq.SUBSET)
    env.reset(options={"target": "dog"})
    total, term = 0.0, False
    for i in range(20):
        assert not term
        _, r, term, trunc, info = env.step("Is it a vehicle?")
        total += r
    assert term and not trunc and not info["won"] and total == -20.0
    with pytest.raises(RuntimeError):
        env.step("Is it alive?")


def test_seeded_resets_repeat():
    a, b = tq.make(), tq.make()
    ta = [a.reset(seed=s)[1]["target"] for s in range(20)]
    tb = [b.reset(seed=s)[1]["target"] for s in range(20)]
    assert ta == tb and len(set(ta)) > 5


def test_make_validates_arguments():
    assert tq.make(targets=tq.SUBSET).targets == tq.SUBSET
    assert tq.make(max_turns=5).max_turns == 5
    with pytest.raises(ValueError, match="valid targets"):
        tq.make(targets=["dog", "unicorn"])
    with pytest.raises(NotImplementedError):
        tq.make(oracle="hf:google/flan-t5-small")
    with pytest.raises(ValueError, match="'kb'.*hf:<model id or path>"):
        tq.make(oracle="gpt")
    with pytest.raises(ValueError):
        tq.make(oracle="hf:")
