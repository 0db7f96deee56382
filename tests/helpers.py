"""Small helpers the test files share (imported as `from helpers import run_dir`; pytest puts tests/
on sys.path)."""


def run_dir(tmp_path):
    """The single run directory a script wrote under --output-dir tmp_path."""
    (d,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return d


def paired_difference(after, before):
    """Mean per-episode difference (after − before) between two evaluations of the same episodes
    (same env seeds, targets and sampling seed: common random numbers) and its standard error,
    s.d./√n of the differences. Learning tests assert mean > 2 s.e.: an improvement larger than its
    own noise."""
    import numpy as np

    d = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    assert d.shape == (len(after),) and len(d) > 1, (
        "paired evaluations need the same number of episodes"
    )
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def assert_close_sums(got, want, terms):
    """got ≈ want for two float32 computations of one quantity whose sums run in another order or
    shape: micro-batches, padding, grouped rows, another thread count or CPU. Rounding grows with
    the magnitude of what is summed and with the number of parts, so the tolerance does too: atol =
    8 · terms · ε · max|want| over the whole tensor (ε = 1.19e-7; 8 is four times the largest error
    measured, 36 ε·max|g| for a gradient summed over 18 micro-batches), rtol = 1e-4. A real change
    of the objective is far above it: a micro-batch weighed wrong moves the gradient by ~1/terms."""
    import torch

    atol = 8 * terms * torch.finfo(want.dtype).eps * want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=atol)


def assert_margin(value, se, k, context=()):
    """Assert value > k·se: a learning test's gain beyond k standard errors of its own noise (k = −2
    for "did not fall"). With TURNRL_MARGINS=FILE set, first append {test, value, se, margin in
    s.e., k, threads, xdist worker} as a JSON line, so benchmark/test_margins.sh can tabulate every
    learning test's margin under several worker and thread counts (docs/usage.md, "Tests")."""
    import json
    import math
    import os

    import torch

    if os.environ.get("TURNRL_MARGINS"):
        row = dict(test=os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0], k=k)
        margin = float(value) / float(se) if se else math.copysign(math.inf, value)
        row.update(value=float(value), se=float(se), margin=margin)
        row.update(threads=torch.get_num_threads(), worker=os.environ.get("PYTEST_XDIST_WORKER"))
        with open(os.environ["TURNRL_MARGINS"], "a") as f:
            f.write(json.dumps(row) + "\n")
    assert value > k * se, (value, se, *context)


def load_checkpoint(run):
    """A run's checkpoint/ as accelerate's save_state wrote it: {"models": the prepared models'
    state dicts in prepare() order, "optimizers": likewise, "custom": the registered objects' state
    dicts in registration order (e.g. [target critic, RunState]), "rng": one RNG record per
    process}."""
    import os

    import torch

    ckpt = os.path.join(str(run), "checkpoint")

    def series(name, ext):
        out, i = [], 0
        while True:
            f = os.path.join(ckpt, f"{name}{'' if i == 0 else f'_{i}'}.{ext}")
            if not os.path.exists(f):
                return out
            out.append(torch.load(f, weights_only=False, map_location="cpu"))
            i += 1

    def indexed(name):
        out = []
        while os.path.exists(os.path.join(ckpt, f"{name}_{len(out)}.pkl")):
            f = os.path.join(ckpt, f"{name}_{len(out)}.pkl")
            out.append(torch.load(f, weights_only=False, map_location="cpu"))
        return out

    return {
        "models": series("pytorch_model", "bin"),
        "optimizers": series("optimizer", "bin"),
        "custom": indexed("custom_checkpoint"),
        "rng": indexed("random_states"),
    }


def launch_two_processes(script, flags, timeout=600):
    """`accelerate launch` of a top-level script as 2 CPU processes (one torch thread each), from
    the repository root; returns the CompletedProcess (stdout and stderr captured as text)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    import socket

    with socket.socket() as s:  # a free port: two such tests may run at once under pytest-xdist
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    launch += ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no"]
    launch += ["--main_process_port", str(port)]
    launch += ["--dynamo_backend", "no", script]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        launch + list(flags), cwd=root, capture_output=True, text=True, env=env, timeout=timeout
    )


def parse(mod, **flags):
    """mod.parse_args on the command line these flags write (--name value; a bool --name or
    --no-name): what `python mod.py --name value ...` would run."""
    argv = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return mod.parse_args(argv)
