"""KV reuse across turns (generate_actions' `cache`, every script's run_episodes): a turn's prompt
starts with the previous turn's prompt and sampled ids, so their keys/values are read off the
rollout's cache and only the rest is computed. Exact by test: turn by turn, generate with the
cache and without (greedy, or sampled with one seed) gives the same ids and the same
log-probabilities of them (to float rounding), for the tiny actor in plain text (greedy and
sampled) and SmolLM2-135M-Instruct in its chat template (sampled, so the episodes differ), over
batches that hold an episode that has ended and conversations truncated by --max-obs-tokens (which
share only a prefix with the cache); sampled rollouts with one seed are the same episodes."""

import random

import pytest
import torch

import archer
import envs
from helpers import assert_close_sums
from test_chat import SYSTEM, needs_smollm2

ENV = "twenty_questions_subset"


def test_longest_prefix_is_the_brute_force_one():
    """envs.longest_prefix over sorted keys: the length of the longest prefix that `ids` shares
    with any key (by brute force over every key), and a key that shares it; (0, None) for none."""
    rng = random.Random(0)
    for _ in range(300):
        keys = sorted({tuple(rng.choices(range(4), k=rng.randrange(1, 9))) for _ in range(12)})
        ids = rng.choices(range(4), k=rng.randrange(1, 9))
        n, key = envs.longest_prefix(keys, ids)

        def shared(k):
            same = [a == b for a, b in zip(k, ids)]
            return same.index(False) if False in same else len(same)

        assert n == max(shared(k) for k in keys)
        assert (key is None) == (n == 0) and (key is None or shared(key) == n)
    assert envs.longest_prefix([], [1, 2]) == (0, None)


def record_logits(model, log):
    """model.generate, also keeping in `log` each call's per-step logits (output_logits) and how
    many columns it was given cached (before generate extends the cache)."""
    generate = model.generate

    def recorded(*args, **kw):
        past = kw.get("past_key_values")
        cached = past.get_seq_length() if past is not None else 0
        out = generate(*args, **kw, output_logits=True)
        log.append((torch.stack(out.logits, 1).float(), cached))  # (rows, steps, vocabulary)
        return out

    return recorded


def play_both_ways(model, tok, args, greedy, n=4):
    """n episodes in which every turn generates twice, with the rollout's cache and without (and
    the same torch seed); at turn 2 episode 0 names its target (it ends; the others go on).
    Returns, per turn, the two calls' sampled ids, the log-probabilities they gave them (before
    temperature and top-k/p) and the columns read off the cache, and the trajectories."""
    stop_ids, end = archer.stop_token_ids(tok), archer.chat_format(tok).end
    targets = envs.make(ENV).targets[:n]
    cache, turns, log = {}, [], []
    model.generate = record_logits(model, log)

    def act(obs, candidates):
        calls = []
        for c in (cache, None):
            log.clear()
            torch.manual_seed(len(turns))
            texts, ids, _ = archer.generate_actions(model, tok, obs, args, stop_ids, greedy, c)
            ((logits, cached),) = log  # one generate call per turn
            logp = torch.log_softmax(logits, -1)
            scores = [logp[r, torch.arange(len(x)), x] for r, x in enumerate(ids)]
            calls.append((texts, ids, scores, cached))
        turns.append(calls)
        texts, ids = list(calls[0][0]), list(calls[0][1])
        if len(turns) == 2:  # episode 0 wins: the next turn's batch holds the others only
            texts[0] = f"Is it a {targets[0]}?"
            ids[0] = tok(texts[0] + end, add_special_tokens=False)["input_ids"]
        return texts, ids

    try:
        chat = archer.chat_format(tok, args.system_prompt)
        trajs = envs.run_episodes(ENV, range(n), act, targets, None, max_turns=5, chat=chat)
    finally:
        del model.generate
    return turns, trajs


def assert_reuse_is_exact(tok, turns, trajs, max_obs_tokens):
    assert len(trajs[0]["steps"]) == 2 and max(len(t["steps"]) for t in trajs) == 5
    for (texts, ids, scores, _), (texts0, ids0, scores0, cached0) in turns:
        assert ids == ids0 and texts == texts0 and cached0 == 0
        for got, want in zip(scores, scores0):  # a few hundred columns summed per attention row
            assert_close_sums(got, want, terms=max_obs_tokens)
    assert turns[0][0][3] == 0 and turns[1][0][3] > 0  # turn 2 read turn 1's off the cache
    observations = [s["observation"] for t in trajs for s in t["steps"]]
    prompts = archer.tokenize_pairs(tok, observations, [""] * len(observations), 0)
    assert max(len(p) for p, _ in prompts) > max_obs_tokens  # some prompts were truncated


@pytest.mark.numerics
@pytest.mark.parametrize("greedy, max_obs_tokens", [(True, 12), (False, 40)])
def test_reuse_is_exact_for_the_tiny_actor_in_plain_text(tiny, greedy, max_obs_tokens):
    """Plain text: the transcript's ids extend the cached ones up to where the sampled ids and the
    re-encoded text part (the action's cut, the answer); --max-obs-tokens keeps the last tokens, so
    a truncated prompt shares no prefix with the cache and is computed whole."""
    model, tok = tiny
    args = archer.Args(env=ENV, max_new_tokens=12, max_obs_tokens=max_obs_tokens)
    turns, trajs = play_both_ways(model, tok, args, greedy)
    assert_reuse_is_exact(tok, turns, trajs, args.max_obs_tokens)


@needs_smollm2
@pytest.mark.numerics
def test_reuse_is_exact_for_smollm2_in_its_chat_template(smollm2):
    """A conversation: each prompt is the previous one, its sampled ids and the reply's turn, so
    all but the new user turn (and the last sampled id) is read off the cache; a truncated one
    (whole old turns dropped) shares its first user turn with the cache; the rest is computed."""
    model, tok = smollm2
    args = archer.Args(env=ENV, max_new_tokens=16, max_obs_tokens=80, system_prompt=SYSTEM)
    turns, trajs = play_both_ways(model, tok, args, greedy=False)  # sampled: unlike episodes
    assert_reuse_is_exact(tok, turns, trajs, args.max_obs_tokens)
    first = [s["observation"].turns[0] for t in trajs for s in t["steps"]]
    assert all(f == first[0] for f in first)  # every conversation starts with the same turn


def test_sampled_rollouts_with_one_seed_are_the_same_episodes(tiny):
    """run_episodes (with the cache) and the same episodes played without it, one torch seed:
    the same sampled ids, turn by turn (generate draws its random numbers in the same order; the
    logits differ at most in rounding, which moved no draw here)."""
    model, tok = tiny
    args = archer.Args(env=ENV, max_new_tokens=12)
    stop_ids = archer.stop_token_ids(tok)

    def act(observations, candidates):
        return archer.generate_actions(model, tok, observations, args, stop_ids)[:2]

    torch.manual_seed(3)
    cached, _ = archer.run_episodes(model, tok, args, range(16))
    torch.manual_seed(3)
    plain = envs.run_episodes(ENV, range(16), act, None, None, max_turns=args.max_turns)
    ids = [[[s["action_ids"] for s in t["steps"]] for t in trajs] for trajs in (cached, plain)]
    assert ids[0] == ids[1] and sum(len(t["steps"]) for t in cached) >= 16 * 5


def test_a_model_that_keeps_no_cache_plays_uncached():
    """--gradient-checkpointing: generate keeps no keys/values (the model is in training mode), so
    nothing is cached and every turn is computed whole, as before KV reuse."""
    args = archer.Args(env=ENV, gradient_checkpointing=True, max_new_tokens=8, max_turns=3)
    torch.manual_seed(0)
    model, tok = archer.load_actor("tiny", args)
    trajs, n_tokens = archer.run_episodes(model.train(), tok, args, range(4))
    assert len(trajs) == 4 and all(len(t["steps"]) == 3 for t in trajs) and n_tokens > 0
