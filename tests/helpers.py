"""Small helpers the test files share (imported as `from helpers import run_dir`; pytest puts tests/ on sys.path)."""


def run_dir(tmp_path):
    """The single run directory a script wrote under --output-dir tmp_path."""
    (d,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return d
