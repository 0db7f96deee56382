"""Small helpers the test files share (imported as `from helpers import run_dir`; pytest puts tests/ on sys.path)."""


def run_dir(tmp_path):
    """The single run directory a script wrote under --output-dir tmp_path."""
    (d,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return d


def paired_difference(after, before):
    """Mean per-episode difference (after − before) between two evaluations of the same episodes (same env seeds,
    targets and sampling seed: common random numbers) and its standard error, s.d./√n of the differences.
    Learning tests assert mean > 2 s.e.: an improvement larger than its own noise."""
    import numpy as np

    d = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    assert d.shape == (len(after),) and len(d) > 1, "paired evaluations need the same number of episodes"
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))
