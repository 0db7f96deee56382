"""Evaluation you can trust: the same policy gets the same number (fixed env seeds, targets and
sampling seed), standard errors are the textbook ones, and evaluating between training steps does
not change training."""

import functools
import importlib
import json
import math

import numpy as np
import pytest
import torch

from helpers import run_dir

SCRIPTS = ["archer", "archer_offline", "chai", "filtered_bc", "ppo_token", "gigpo"]
ENV = "twenty_questions_subset"


@pytest.mark.parametrize("script", SCRIPTS)
def test_same_policy_same_number_and_training_rng_untouched(script, tiny):
    mod = importlib.import_module(script)
    model, tok = tiny
    args = mod.Args(env=ENV, eval_episodes=12, max_new_tokens=8, max_turns=4, device="cpu")
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = mod.evaluate(functools.partial(mod.run_episodes, model, tok, args), args)
    assert torch.equal(torch.get_rng_state(), before)  # the training RNG is restored
    torch.manual_seed(999)  # whatever the training RNG is doing, the evaluation is the same
    second = mod.evaluate(functools.partial(mod.run_episodes, model, tok, args), args)
    assert first["returns"] == second["returns"] and first["example"] == second["example"]
    assert len(first["returns"]) == 12 and set(first["per_target_success"]) <= set(
        mod.envs.make(ENV).targets
    )


def test_standard_errors_by_hand():
    import envs

    trajs = [
        {"return": r, "success": s, "target": t}
        for r, s, t in [
            (-3.0, True, "dog"),
            (-20.0, False, "dog"),
            (-5.0, True, "pen"),
            (-8.0, True, "pen"),
        ]
    ]
    st = envs.episode_stats(trajs)
    mean = (-3 - 20 - 5 - 8) / 4  # -9
    var = (
        (-3 - mean) ** 2 + (-20 - mean) ** 2 + (-5 - mean) ** 2 + (-8 - mean) ** 2
    ) / 3  # 60.667, ddof = 1
    assert st["return"] == mean and math.isclose(st["return_se"], math.sqrt(var / 4))
    assert st["success_rate"] == 0.75 and math.isclose(
        st["success_rate_se"], math.sqrt(0.25 / 4)
    )  # s.d. 0.5
    assert st["per_target_success"] == {"dog": 0.5, "pen": 1.0} and st["returns"] == [
        -3.0,
        -20.0,
        -5.0,
        -8.0,
    ]
    one = envs.episode_stats(trajs[:1])
    assert one["return"] == -3.0 and math.isnan(one["return_se"])


def _history_losses(path):
    summary = json.loads((run_dir(path) / "summary.json").read_text())
    return [
        {k: v for k, v in h.items() if "loss" in k or k in ("charts/episodic_return", "losses/nll")}
        for h in summary["history"]
    ]


@pytest.mark.parametrize("script", ["filtered_bc", "archer"])
def test_evaluating_between_iterations_does_not_change_training(script, tmp_path):
    mod = importlib.import_module(script)
    common = dict(
        env=ENV,
        iterations=3,
        rollouts_per_iter=4,
        batch_size=8,
        micro_batch_size=4,
        eval_episodes=4,
        max_new_tokens=8,
        max_turns=4,
        checkpoint_every=0,
        device="cpu",
        seed=3,
    )
    extra = {
        "filtered_bc": dict(scripted_episodes=30, offline_steps=2, actor_updates_per_iter=2),
        "archer": dict(
            scripted_episodes=30,
            bc_steps=2,
            warmup_iters=1,
            critic_updates_per_iter=2,
            actor_updates_per_iter=2,
        ),
    }[script]
    mod.main(mod.Args(output_dir=str(tmp_path / "with"), eval_every=1, **common, **extra))
    mod.main(mod.Args(output_dir=str(tmp_path / "without"), eval_every=0, **common, **extra))
    with_eval, without = _history_losses(tmp_path / "with"), _history_losses(tmp_path / "without")
    assert len(with_eval) == 3 and with_eval == without
    assert not all(np.isnan(v) for h in with_eval for v in h.values() if isinstance(v, float))
