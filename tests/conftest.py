"""Tests run offline and on CPU: nothing may download weights or talk to wandb."""

import os
import sys

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def train_bc_actor(tmp_path_factory, name, env, steps):
    """filtered_bc.py offline with rho = 1.0 (plain BC) on its 2,000 scripted episodes of `env`,
    `steps` steps, seed 1, evaluated on 200 episodes and saved with --save-model. Returns (actor
    directory, BC summary.json as a dict)."""
    import json

    import filtered_bc
    from helpers import run_dir

    out = tmp_path_factory.mktemp(name)
    filtered_bc.main(
        filtered_bc.Args(
            output_dir=str(out),
            exp_name="bc",
            env=env,
            iterations=0,
            offline_steps=steps,
            offline_rho=1.0,
            eval_episodes=200,
            save_model=True,
            checkpoint_every=0,
            device="cpu",
            seed=1,
        )
    )
    run = run_dir(out)
    return str(run / "actor"), json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="session")
def bc_actor(tmp_path_factory):
    """The SFT start the learning tests share: plain BC (train_bc_actor), 800 steps on 2,000
    scripted episodes of the 10-word game. Trained once per session (~2 minutes on 2 cores)."""
    return train_bc_actor(tmp_path_factory, "bc_actor", "twenty_questions_subset", 800)


@pytest.fixture(scope="session")
def gmc_bc_actor(tmp_path_factory):
    """The Guess My City SFT start: as bc_actor, but 1,600 steps (what BC needs on this game:
    sampled success 0.58 after 800 steps, 0.85 after 1,600; docs/benchmark.md, "Guess My City").
    Trained once per session (~8 minutes on 2 cores)."""
    return train_bc_actor(tmp_path_factory, "gmc_bc_actor", "guess_my_city", 1600)


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): a randomly initialised `tiny` actor for the 10-word game (seed 0), in
    eval mode; shared by tests that only read it."""
    import torch

    import archer

    torch.manual_seed(0)
    model, tok = archer.load_actor("tiny", "twenty_questions_subset")
    return model.eval(), tok
