"""The repository stands on its own: nothing in it points at files outside it (a copied script plus
envs/ and docs/ must be complete)."""

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
    offenders = [
        os.path.relpath(p, ROOT)
        for p in repository_files()
        if needle in open(p, encoding="utf-8", errors="replace").read()
    ]
    assert not offenders, f"files that refer to {needle}: {offenders}"


ALGORITHM_FILES = sorted(f for f in os.listdir(ROOT) if f.endswith(".py"))  # every top-level file


def test_equations_doc_exists_and_code_cites_it():
    doc = os.path.join(ROOT, "docs", "equations.md")
    assert os.path.exists(doc)
    for script in ALGORITHM_FILES:
        assert "docs/equations.md" in open(os.path.join(ROOT, script), encoding="utf-8").read(), (
            script
        )


def test_algorithm_first_anatomy():
    """Each algorithm file reads algorithm first (docs: "Anatomy of an algorithm file"): its first
    loss function (a top-level `*_loss`) starts within the first 250 lines, before `main`, and the
    shared plumbing sits below `main` under its marker."""
    import ast

    for script in ALGORITHM_FILES:
        source = open(os.path.join(ROOT, script), encoding="utf-8").read()
        tree = ast.parse(source)
        lines = {
            n.name: n.lineno for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        }
        first_loss = min(line for name, line in lines.items() if name.endswith("_loss"))
        marker = next(
            i for i, line in enumerate(source.splitlines(), 1) if "SHARED PLUMBING" in line
        )
        assert first_loss <= 250, f"{script}: the first loss starts at line {first_loss}"
        assert first_loss < lines["main"] < marker, script
        assert "docs/" + script.replace(".py", ".md") in source.split('"""')[1], script


def test_every_script_has_a_fast_learning_test():
    """The fast tier (the README's test command, CI) proves that every algorithm learns: each
    top-level script has, in tests/test_<script>.py, a `test_learning_*` test that is not marked
    `slow` (the slow tier, `python -m pytest -m slow -n 0`, holds the long runs)."""
    import ast

    missing = []
    for script in ALGORITHM_FILES:
        path = os.path.join(ROOT, "tests", "test_" + script)
        tree = ast.parse(open(path, encoding="utf-8").read()) if os.path.exists(path) else None
        fast = [
            node.name
            for node in (tree.body if tree else [])
            if isinstance(node, ast.FunctionDef)
            and node.name.startswith("test_learning")
            and not any("slow" in ast.unparse(d) for d in node.decorator_list)
        ]
        if not fast:
            missing.append(script)
    assert not missing, f"scripts without a fast-tier test_learning_* test: {missing}"


# --- the budget (docs/usage.md "Code layout"; DESIGN: "Budget") ------------------------------
MAIN, LOOP_START = 200, 60  # main's lines at most, and where its training loop starts at the latest
# No script grows: (lines in all, lines below main), its ceiling. The totals are not targets any
# more (issue 82); a change that needs lines makes something else shorter. Raised, not paid for:
# issue 83's KV reuse (40 below main in every script) and issue 81's GraphGPO (31 in gigpo.py),
# 2026-12-07; then issue 82's common core (run_episodes without the Chooser, whose scripts play
# through rollouts/choose_episodes; evaluate(play); main's own 'if eval_due' / 'if
# checkpoint_due' and its once-only warm start; one value per line; observation_ids; per-script
# RANGES; Q-SFT's own checks): +11 to +48 a script after its cuts (CHAI's evaluate_chai and
# GiGPO's run_groups body gone, Q-SFT's re-derived backup, the state-alone round trips),
# 2026-12-07; then issue 80's --pack-episodes in filtered_bc.py (+57, above main: packed_sequences,
# packed_warm_start; the SmolLM2 SFT stage is ~18x slower per pair without it), 2026-12-07.
# Lower these as scripts shrink.
CEILING = {
    "archer.py": (1226, 758),
    "archer_offline.py": (1108, 658),
    "chai.py": (1142, 724),
    "filtered_bc.py": (1060, 685),
    "gigpo.py": (1186, 702),
    "ilql.py": (1147, 606),
    "poad.py": (1291, 763),
    "ppo_token.py": (1202, 758),
    "qsft.py": (1204, 663),
}


def anatomy(script):
    """A script's line counts: total, Args fields, the ALGO LOGIC section (from its marker to
    main), main (set-up before the training loop, the loop, what follows) and below main."""
    import ast

    source = open(os.path.join(ROOT, script), encoding="utf-8").read()
    lines, tree = source.splitlines(), ast.parse(source)
    main = next(n for n in tree.body if getattr(n, "name", None) == "main")
    args = next(n for n in tree.body if getattr(n, "name", None) == "Args")
    loop = next(
        n for n in main.body if isinstance(n, ast.For) and "iteration" in ast.unparse(n.target)
    )
    algo = next(i for i, line in enumerate(lines, 1) if line.startswith("# ALGO LOGIC"))
    return {
        "lines": len(lines),
        "fields": sum(isinstance(n, ast.AnnAssign) for n in args.body),
        "algorithm": main.lineno - algo,
        "main": main.end_lineno - main.lineno + 1,
        "setup": loop.lineno - main.lineno,
        "loop": loop.end_lineno - loop.lineno + 1,
        "after": main.end_lineno - loop.end_lineno,
        "below": len(lines) - main.end_lineno,
    }


def budget_table():
    """The markdown table docs/usage.md shows (`python tests/test_repository.py` prints it)."""
    header = "| script | lines (ceiling) | Args fields | algorithm | main (set-up / loop / after) "
    header += "| below main (ceiling) |"
    rows = [header, "|---|---|---|---|---|---|"]
    for script in ALGORITHM_FILES:
        a, (lines, below) = anatomy(script), CEILING[script]
        rows.append(
            f"| {script} | {a['lines']:,} ({lines:,}) | "
            f"{a['fields']} | {a['algorithm']} | {a['main']} ({a['setup']} / {a['loop']} / "
            f"{a['after']}) | {a['below']} ({below}) |"
        )
    return "\n".join(rows)


def test_every_script_keeps_its_line_budget():
    """DESIGN "Budget": main reads as the training loop (at most 200 lines, the loop starting within
    its first 60), and no script grows past its ceiling (CEILING: in all, and below main)."""
    over = []
    for script in ALGORITHM_FILES:
        a, (lines, below) = anatomy(script), CEILING[script]
        checks = [
            (a["lines"], lines, "lines"),
            (a["below"], below, "lines below main"),
            (a["main"], MAIN, "lines of main"),
            (a["setup"], LOOP_START, "lines before main's training loop"),
        ]
        over += [f"{script}: {n} {what} > {limit}" for n, limit, what in checks if n > limit]
    assert not over, "\n".join(over)


def test_the_docs_show_the_budget_as_it_is():
    """docs/usage.md "Code layout" holds the table of budget_table(), so a change that grows a
    script shows there (regenerate: python tests/test_repository.py)."""
    doc = open(os.path.join(ROOT, "docs", "usage.md"), encoding="utf-8").read()
    assert budget_table() in doc, (
        "docs/usage.md: paste the output of python tests/test_repository.py"
    )


# --- the README as a front door (issue 70): what it shows is what was measured -----------------
def tables(path):
    """The markdown tables of a file: each a list of rows, each row a list of stripped cells."""
    found, rows = [], []
    for line in open(os.path.join(ROOT, path), encoding="utf-8").read().splitlines() + [""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            found, rows = found + [rows], []
    return found


def table(path, *header):
    """The rows below the header of every table in `path` whose header starts with `header`."""
    found = [rows[2:] for rows in tables(path) if rows[0][: len(header)] == list(header)]
    assert found, f"{path}: no table whose header starts {header}"
    return [row for rows in found for row in rows]


def default_runs():
    """benchmark/results/defaults.md's seed-1 rows, from each of its tables (one per CPU):
    {script: [(minutes, paired gain ± s.e., the gain, gain / s.e.)]}."""
    import re

    # a gain cell: +5.60 ± 0.71 (7.8 s.e.)
    cell = re.compile(r"([+-]\d+\.\d+) ± (\d+\.\d+) \((\d+\.\d+) s\.e\.\)")
    runs = {}
    for r in table("benchmark/results/defaults.md", "script", "seed", "minutes"):
        if r[1] == "1":
            gain, se, ratio = cell.fullmatch(r[4]).groups()
            runs.setdefault(r[0], []).append((r[2], f"{gain} ± {se}", gain, ratio))
    return runs


def span(values, between="–"):
    """One value as it is; several as least–most, by number (`≤ 6.8`, an upper bound, is 6.8)."""
    values = sorted(set(values), key=lambda v: float(v.lstrip("≤ ")))
    return values[0] if len(values) == 1 else f"{values[0]}{between}{values[-1]}"


def test_the_readme_shows_the_default_runs_as_measured():
    """README.md's table of scripts has one row per top-level script whose minutes and paired gain
    are the span of that script's seed-1 rows in benchmark/results/defaults.md (one table per CPU):
    minutes least–most, the gain `least to most` with its span in s.e.; docs/benchmark.md "Default
    runs" shows the same minutes and each seed-1 gain ± s.e. of defaults.md, no other. Every other
    signed gain, `N minutes` or `N s.e.` the README states is one of these (the quickstart's is
    POAD's), except the fast test tier's minutes (docs/usage.md's "Tests") and the bar, 2 s.e."""
    import re

    runs = default_runs()
    assert sorted(runs) == ALGORITHM_FILES, sorted(runs)
    want = {
        script: (
            span([m for m, *_ in rows]),
            f"{span([g for *_, g, _ in rows], ' to ')} ({span([x for *_, x in rows])} s.e.)",
        )
        for script, rows in runs.items()
    }
    readme = {r[0].strip("`"): (r[3], r[4]) for r in table("README.md", "script", "implements")}
    assert readme == want, {s: (readme.get(s), want[s]) for s in want if readme.get(s) != want[s]}
    for r in table("docs/benchmark.md", "script", "minutes (seed 1, alone)"):
        script = r[0].split()[0]
        assert r[1].rstrip(" †") == want[script][0], f"docs/benchmark.md: {script}'s minutes"
        shown = set(re.findall(r"\(([+−-]\d+\.\d+ ± \d+\.\d+)", r[2]))
        assert shown == {g for _, g, *_ in runs[script]}, f"docs/benchmark.md: {script}, seed 1"
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    gains = set(re.findall(r"(?<![\d.])[+−-]\d+\.\d+", text))
    allowed = {g for rows in runs.values() for *_, g, _ in rows}
    assert gains <= allowed, f"README: gains that are not defaults.md's: {gains - allowed}"
    ratios = set(re.findall(r"(\d[\d.–]*) s\.e\.", text)) - {"2"}  # 2: the bar
    allowed = {re.search(r"\((.*) s\.e\.\)", g)[1] for _, g in want.values()}
    assert ratios <= allowed, f"README: s.e. that are not defaults.md's: {ratios - allowed}"
    usage = open(os.path.join(ROOT, "docs", "usage.md"), encoding="utf-8").read()
    (fast_tier,) = re.findall(r"about (\d+–\d+)\s+minutes on two cores", text)  # the test tier
    assert f"about **{fast_tier} minutes** on two cores" in usage, "docs/usage.md: the tier's time"
    minutes = set(re.findall(r"(\d[\d.–]*) minutes", text)) - {fast_tier}
    allowed = {m for m, _ in want.values()}
    assert minutes <= allowed, f"README: minutes that are not defaults.md's: {minutes - allowed}"
    quickstart = text.split("## Quickstart")[1].split("##")[0]
    minutes, gain = want["poad.py"]
    assert f"{minutes} minutes" in quickstart, "the quickstart's POAD minutes"
    assert gain.split(" (")[0] in quickstart, "the quickstart's POAD gain"
    assert gain.split(" (")[1].rstrip(")") in quickstart, "the quickstart's POAD gain in s.e."


def test_the_readme_lists_every_env_and_pins_what_requirements_pin():
    """README.md's table of envs names each of envs.names() once and nothing else, a count of envs
    it states is theirs, and every `package==version` it names is requirements.txt's."""
    import re

    import envs

    named = [n for r in table("README.md", "env", "paper") for n in re.findall(r"`(\w+)`", r[0])]
    assert sorted(named) == sorted(envs.names()), sorted(set(named) ^ set(envs.names()))
    assert len(named) == len(set(named)), named
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for count in re.findall(r"(\d+) envs\b", text):
        assert int(count) == len(envs.names()), f"README: {count} envs, not {len(envs.names())}"
    pins = open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8").read()
    for pin in re.findall(r"[\w.-]+==[\w.]+", text):
        assert pin in pins, f"README names {pin}, requirements.txt does not"


if __name__ == "__main__":
    print(budget_table())
