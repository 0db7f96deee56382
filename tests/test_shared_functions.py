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


OWN = ("PAPER", "_", "RANGES", "AT_LEAST_ONE")  # each script's own: presets, check_args' spans


def top_level_constants(path):
    """{name: the source of every top-level assignment to it}, each script's own constants (OWN:
    the preset tables PAPER, their source line and private _TABLES; check_args' RANGES and
    AT_LEAST_ONE, which name its own Args fields) left out."""
    source = open(path, encoding="utf-8").read()
    consts = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]:
                if not name.startswith(OWN) or name == "_last_progress":
                    consts.setdefault(name, []).append(ast.get_source_segment(source, node))
    return consts


def test_shared_constants_are_identical():
    """The plumbing's constants (EVAL_SEED, RESUMABLE, PACKAGED, ...) are copies too."""
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


def test_a_copy_carries_only_what_its_script_uses():
    """The shared plumbing is the common core: every top-level function, class and constant of a
    script is used in that script (a feature one script needs lives in that script, under its own
    name), and check_args' RANGES and AT_LEAST_ONE name only the script's own Args fields."""
    import importlib
    from dataclasses import fields

    unused, foreign = [], []
    for path in SCRIPTS:
        tree = ast.parse(open(path, encoding="utf-8").read())
        defined = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        loaded = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        script = os.path.basename(path)
        unused += [
            f"{script}: {name}" for name in dict.fromkeys(defined) if name not in loaded | {"cli"}
        ]
        module = importlib.import_module(script[:-3])
        own = {f.name for f in fields(module.Args)}
        named = set(module.RANGES) | set(module.AT_LEAST_ONE)
        foreign += [f"{script}: {name}" for name in sorted(named - own)]
    assert not unused, "defined but not used in the script: " + ", ".join(unused)
    assert not foreign, "check_args names fields its Args does not have: " + ", ".join(foreign)


def test_every_args_field_is_read_by_its_script():
    """A flag a script declares is one it reads: `args.<field>` (or the name as a keyword or a
    string, as presets and RESUMABLE name fields) outside its Args class. A copy that reads
    another field in its place (e.g. batch_size for bc_batch_size) leaves the flag doing nothing."""
    import importlib
    import re
    from dataclasses import fields

    unread = []
    for path in SCRIPTS:
        source = open(path, encoding="utf-8").read()
        args = next(n for n in ast.parse(source).body if getattr(n, "name", None) == "Args")
        lines = source.splitlines()
        rest = "\n".join(lines[: args.lineno - 1] + lines[args.end_lineno :])
        module = importlib.import_module(os.path.basename(path)[:-3])
        for f in fields(module.Args):
            pattern = rf"\bargs\.{f.name}\b|\b{f.name}=|[\"']{f.name}[\"']"
            if not re.search(pattern, rest):
                unread.append(f"{os.path.basename(path)}: --{f.name.replace('_', '-')}")
    assert not unread, "flags no code reads: " + ", ".join(unread)
