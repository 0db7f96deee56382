"""Functions that two top-level scripts share are copies, and copies must stay identical.

A function (or class) with the same name in two algorithm files must have the same source, character
for character; a deliberate difference takes a new name (the single-file design: each script stands
alone)."""

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "*.py")))


def top_level_definitions(path):
    source = open(path, encoding="utf-8").read()
    tree = ast.parse(source)
    defs = {}
    for node in tree.body:
        if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ) and node.name not in ("Args", "main"):
            defs[node.name] = ast.get_source_segment(source, node)
    return defs


def test_there_are_scripts():
    assert any(os.path.basename(p) == "filtered_bc.py" for p in SCRIPTS)


def test_same_name_means_same_source():
    defs = {os.path.basename(p): top_level_definitions(p) for p in SCRIPTS}
    mismatches = []
    names = sorted({n for d in defs.values() for n in d})
    for name in names:
        holders = [(f, d[name]) for f, d in defs.items() if name in d]
        first_file, first_src = holders[0]
        for f, src in holders[1:]:
            if src != first_src:
                mismatches.append(f"{name}: {first_file} and {f} differ")
    assert not mismatches, "\n".join(mismatches)


def top_level_constants(path):
    """{name: the source of every top-level assignment to it}, the preset tables (PAPER, its
    source line and private _TABLES) left out: they are each script's own."""
    source = open(path, encoding="utf-8").read()
    consts = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]:
                if not name.startswith(("PAPER", "_")) or name == "_last_progress":
                    consts.setdefault(name, []).append(ast.get_source_segment(source, node))
    return consts


def test_shared_constants_are_identical():
    """The plumbing's constants (EVAL_SEED, RESUMABLE, RANGES, PACKAGED, ...) are copies too."""
    consts = {os.path.basename(p): top_level_constants(p) for p in SCRIPTS}
    names = sorted({n for c in consts.values() for n in c})
    mismatches = []
    for name in names:
        holders = [(f, c[name]) for f, c in consts.items() if name in c]
        mismatches += [
            f"{name}: {holders[0][0]} and {f} differ" for f, v in holders if v != holders[0][1]
        ]
    assert len(names) >= 6 and not mismatches, "\n".join(mismatches)


def test_scripts_import_nothing_from_each_other():
    modules = {os.path.splitext(os.path.basename(p))[0] for p in SCRIPTS}
    for path in SCRIPTS:
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                continue
            assert not set(names) & modules, (
                f"{os.path.basename(path)} imports another top-level script: {names}"
            )
