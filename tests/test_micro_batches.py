"""Gradient accumulation never changes the objective: in every script, every optimiser step's
gradient with --micro-batch-size equal to the batch equals the one with micro-batches of 1 and of a
size that does not divide the batch (float tolerance). Losses that are means over items
(utterances, transitions) weigh a micro-batch by its items, token means (ILQL, Q-SFT, PPO, POAD,
GiGPO) by its loss tokens (micro_batches, and the PPO-style steps)."""

import importlib

import pytest
import torch

from helpers import assert_close_sums

pytestmark = pytest.mark.numerics  # .ci/run runs these again at two torch threads
BATCH = 6
COMMON = dict(
    env="guess_my_city",  # utterances of 3 to 7 tokens: token and item means differ
    max_turns=3,
    max_new_tokens=6,
    eval_episodes=1,
    eval_every=0,
    checkpoint_every=0,
    iterations=1,
    device="cpu",
    seed=7,
    scripted_episodes=12,
    batch_size=BATCH,
    max_grad_norm=1e9,  # no clipping: it would rescale what is compared
)
RUNS = {
    "archer": dict(
        bc_steps=1, warmup_iters=0, rollouts_per_iter=2, critic_updates_per_iter=1,
        actor_updates_per_iter=1, use_baseline=True, baseline_updates_per_iter=1,
    ),
    "archer_offline": dict(critic_updates_per_iter=1, actor_updates_per_iter=1),
    "archer_offline_reinforce_bc": dict(
        critic_updates_per_iter=1, actor_updates_per_iter=1, actor_loss="reinforce_bc"
    ),
    "chai": dict(bc_steps=1, rollouts_per_iter=2, critic_updates_per_iter=1, k=2),
    "filtered_bc": dict(offline_steps=1, rollouts_per_iter=2, actor_updates_per_iter=1),
    "gigpo": dict(bc_steps=1, groups_per_iter=1, group_size=2, ppo_epochs=1),
    "poad": dict(bc_steps=1, rollouts_per_iter=2, ppo_epochs=1),
    "ppo_token": dict(bc_steps=1, rollouts_per_iter=2, ppo_epochs=1),
    "qsft": dict(bc_steps=1, updates_per_iter=1),
    "ilql": dict(updates_per_iter=1),
}  # fmt: skip


def step_gradients(script, micro, tmp_path, monkeypatch):
    """Every optimiser step's gradients of a one-iteration run (the step itself is skipped, so every
    run sees the same models)."""
    mod = importlib.import_module(script.split("_reinforce")[0])
    steps = []

    def record(self, closure=None):
        steps.append(
            [p.grad.clone() for g in self.param_groups for p in g["params"] if p.grad is not None]
        )

    monkeypatch.setattr(torch.optim.AdamW, "step", record)
    if script == "gigpo":  # three-turn games all lose alike: A = 0, a zero gradient; give it a ramp
        real = mod.gigpo_advantages

        def ramp(trajs, args):
            adv, parts = real(trajs, args)
            return torch.linspace(-1.0, 1.0, len(adv)), parts

        monkeypatch.setattr(mod, "gigpo_advantages", ramp)
    args = mod.Args(
        output_dir=str(tmp_path / str(micro)), micro_batch_size=micro, **COMMON, **RUNS[script]
    )
    mod.main(args)
    return steps


@pytest.mark.parametrize("script", list(RUNS))
def test_micro_batches_give_the_full_batch_gradient(script, tmp_path, monkeypatch):
    full = step_gradients(script, BATCH, tmp_path, monkeypatch)
    assert full and all(full)
    for micro in (1, 4):  # 4 does not divide the batch of 6
        split = step_gradients(script, micro, tmp_path, monkeypatch)
        assert len(split) == len(full)
        for a, b in zip(full, split):
            assert len(a) == len(b) and max(x.abs().max() for x in a) > 0  # no zeros compared
            assert_close_sums(
                torch.cat([y.flatten() for y in b]), torch.cat([x.flatten() for x in a]), BATCH
            )
