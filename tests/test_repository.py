"""The repository stands on its own: nothing in it points at files outside it (a copied script plus envs/
and docs/ must be complete)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {".git", "runs", "data", "wandb", "__pycache__", ".pytest_cache", ".ruff_cache"}
TEXT = (".py", ".md", ".txt", ".ini", ".toml", ".sh", ".cfg", ".yml", ".yaml", "run")


def repository_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".venv")]
        for f in files:
            if f.endswith(TEXT):
                yield os.path.join(folder, f)


def test_no_file_refers_outside_the_repository():
    needle = "../" + "shared"  # split so this file does not match itself
    offenders = [os.path.relpath(p, ROOT) for p in repository_files()
                 if needle in open(p, encoding="utf-8", errors="replace").read()]
    assert not offenders, f"files that refer to {needle}: {offenders}"


def test_equations_doc_exists_and_code_cites_it():
    doc = os.path.join(ROOT, "docs", "equations.md")
    assert os.path.exists(doc)
    for script in ["archer.py", "archer_offline.py", "chai.py", "filtered_bc.py", "ppo_token.py"]:
        assert "docs/equations.md" in open(os.path.join(ROOT, script), encoding="utf-8").read(), script
