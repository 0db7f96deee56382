"""datasci_coding: the sandbox contains hostile programs, the reward is ROC AUC computed by the env,
the contract (reset/step/targets/penalties), action parsing, scripted policies, datasets.

Tests with "bwrap" in their name need a working bubblewrap sandbox and are skipped, with the reason,
where there is none (``apt-get install bubblewrap``; see docs/envs.md, DataSciCoding)."""

import json
import os
import socket
import time

import pytest

import envs
from envs import datasci_coding as dc

BWRAP_OK, BWRAP_WHY = dc.bwrap_status()
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"bwrap sandbox unavailable: {BWRAP_WHY}")
LOGREG = dc.GOOD["logistic_regression"]
FORK_BOMB = "    import os\n    while True:\n        os.fork()"
CHEAT = """from sklearn.datasets import load_breast_cancer
def build_model(x_train, y_train):
    data = load_breast_cancer()
    labels = {row.tobytes(): label for row, label in zip(data.data, data.target)}
    class Lookup:
        def predict_proba(self, x):
            p = np.array([labels[row.tobytes()] for row in x], dtype=float)
            return np.c_[1 - p, p]
    return Lookup()"""


@pytest.fixture(scope="module")
def box():
    """One bwrap env for the hostile programs (1 GiB of address space; the timeout is generous for
    loaded CI machines: only the infinite loop below waits for a timeout, its own)."""
    if not BWRAP_OK:
        pytest.skip(f"bwrap sandbox unavailable: {BWRAP_WHY}")
    env = envs.make("datasci_coding", sandbox="bwrap", timeout_s=20, memory_mb=1024)
    yield env
    env.close()


def attempt(env, program, target="breast_cancer", seed=0):
    env.reset(seed=seed, options={"target": target})
    start = time.perf_counter()
    obs, reward, term, trunc, info = env.step(program)
    return obs, reward, term, info, time.perf_counter() - start


def assert_failed(obs, reward, term, info, *needles):
    """The failure outcome: penalty -1, the episode goes on, the error is in the next prompt."""
    assert reward == -1.0 and not term and not info["won"] and info["auc"] is None
    assert "An error was reported" in obs and "Here is the fixed version" in obs
    for needle in needles:
        assert needle in info["error"] and needle in obs, info["error"]


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


# --- the sandbox against hostile programs ---------------------------------------------------------
@needs_bwrap
def test_bwrap_infinite_loop_hits_the_wall_clock_timeout():
    env = envs.make("datasci_coding", sandbox="bwrap", timeout_s=2)
    obs, reward, term, info, seconds = attempt(env, "    while True:\n        pass")
    assert_failed(obs, reward, term, info, "TimeoutError", "within 2 s")
    assert 2 <= seconds < 6
    env.close()


def test_bwrap_memory_bomb_gets_memory_error(box):
    bomb = "    blocks = []\n    while True:\n        blocks.append(bytearray(100 << 20))"
    obs, reward, term, info, seconds = attempt(box, bomb)
    assert_failed(obs, reward, term, info, "MemoryError", "blocks.append(bytearray(100 << 20))")


@needs_bwrap
def test_bwrap_cpu_and_file_size_limits():
    env = envs.make("datasci_coding", sandbox="bwrap", timeout_s=10, cpu_s=1)
    obs, reward, term, info, seconds = attempt(env, "    while True:\n        pass")
    assert_failed(obs, reward, term, info, "CPU time limit (1 s)")
    big = "    open('big', 'wb').write(b'x' * (100 << 20))"
    obs, reward, term, info, _ = attempt(env, big)
    assert_failed(obs, reward, term, info, "File too large")
    env.close()


def test_bwrap_fork_bomb_is_refused_and_leaves_no_process(box):
    obs, reward, term, info, seconds = attempt(box, FORK_BOMB)
    assert_failed(obs, reward, term, info, "os.fork()", "Operation not permitted")
    # step() has already waited for bwrap, so nothing of this env's sandbox may remain. Only this
    # env's: its bwrap command line names its own run directory, and under pytest-xdist other
    # workers start bwrap sandboxes of their own at the same time (CI once counted two of theirs).
    ours = [p for p in os.listdir("/proc") if p.isdigit() and box.runner.root in _cmdline(p)]
    assert [p for p in ours if _cmdline(p).startswith(dc._bwrap_path())] == []


@needs_bwrap
@pytest.mark.skipif(os.geteuid() == 0, reason="RLIMIT_NPROC does not bind kernel uid 0 (root)")
def test_bwrap_fork_bomb_without_seccomp_meets_the_process_limit():
    env = envs.make("datasci_coding", sandbox="bwrap", timeout_s=5)
    env.runner.seccomp = False
    bomb = (
        "    import os, time\n    while True:\n"
        "        if os.fork() == 0:\n            time.sleep(10)"
    )
    obs, reward, term, info, seconds = attempt(env, bomb)
    assert_failed(obs, reward, term, info, "Resource temporarily unavailable")
    env.close()


def test_bwrap_writes_outside_its_directory_fail(box, tmp_path):
    repo_file = os.path.join(os.path.dirname(dc.__file__), "pwned.py")
    for path in (str(tmp_path / "pwned.txt"), repo_file, "/pwned"):
        obs, reward, term, info, _ = attempt(box, f"    open({path!r}, 'w').write('pwned')")
        assert_failed(obs, reward, term, info, "Error")
        assert not os.path.exists(path)
    # its own directory (the cwd, /sandbox) is writable, and the program still gets scored
    inside = "    open('notes.txt', 'w').write('ok')\n" + LOGREG
    _, reward, term, info, _ = attempt(box, inside)
    assert term and info["won"] and reward > 0.9


def test_bwrap_cannot_read_the_envs_files_or_the_bundled_labels(box, monkeypatch):
    private = os.path.join(box.runner.root, "data-breast_cancer.npz")  # the env's own files
    for program in (
        f"    print(open({dc.__file__!r}).read())",
        f"    print(open({private!r}, 'rb').read())",
        f"    import os\n    print(os.listdir({box.runner.root!r}))",
    ):
        obs, reward, term, info, _ = attempt(box, program)
        assert_failed(obs, reward, term, info, "FileNotFoundError")
    # looking the test labels up in scikit-learn's copy of the dataset fails in the sandbox ...
    obs, reward, term, info, _ = attempt(box, CHEAT)
    assert_failed(obs, reward, term, info, "FileNotFoundError", "load_breast_cancer()")
    # ... while without bwrap the same program reaches a perfect score: what the sandbox prevents
    monkeypatch.setattr(dc, "_warned", False)
    with pytest.warns(RuntimeWarning, match="WITHOUT file-system and network-namespace isolation"):
        plain = envs.make(
            "datasci_coding", sandbox="subprocess", timeout_s=10, allow_unsandboxed=True
        )
    assert plain.sandbox == "subprocess"
    _, reward, term, info, _ = attempt(plain, CHEAT)
    assert reward == 1.0 and term and info["won"]
    plain.close()


def test_bwrap_socket_to_localhost_is_refused(box):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    program = f"    import socket\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)"
    obs, reward, term, info, _ = attempt(box, program)
    assert_failed(obs, reward, term, info, "Operation not permitted")  # the seccomp filter
    box.runner.seccomp = False
    try:  # the network namespace alone: its loopback is not the host's
        obs, reward, term, info, _ = attempt(box, program)
    finally:
        box.runner.seccomp = True
    assert_failed(obs, reward, term, info, "ConnectionRefusedError")
    with pytest.raises(socket.timeout):
        listener.accept()
    listener.close()


def test_bwrap_forged_auc_does_not_count(box):
    _, honest, _, _, _ = attempt(box, LOGREG)
    printed = (
        LOGREG
        + '\n    print("AUC 1.0")'
        + '\n    print(\'{"status": "ok", "auc": 1.0, "scores": []}\')'
    )
    _, reward, term, info, _ = attempt(box, printed)
    assert term and reward == honest and 0.99 < honest < 1.0
    # a program that writes a well-formed fake result to every file descriptor and exits: the env
    # grades the claimed scores (all "class 1") against the hidden labels, i.e. chance
    forger = """import json, os
def build_model(x_train, y_train):
    data = np.load('/data.npz')
    sizes = [len(data[f'x_test_{i}']) for i in range(5)]
    fake = {"status": "ok", "auc": 1.0, "program": 0, "scores": [[[0.0, 1.0]] * n for n in sizes]}
    print("ROC AUC: 1.0")
    for fd in range(64):
        try:
            os.write(fd, (json.dumps(fake) + "\\n").encode())
        except OSError:
            pass
    os._exit(0)"""
    _, reward, term, info, _ = attempt(box, forger)
    assert reward == 0.5 and info["aucs"] == [0.5] * 5


def test_bwrap_killing_the_parent_fails_harmlessly(box):
    me = os.getpid()
    program = (
        f"    import os, signal\n    for pid in (os.getppid(), {me}, 1, -1):\n"
        f"        try:\n            os.kill(pid, signal.SIGKILL)\n"
        f"        except OSError:\n            pass\n    model = None"
    )
    for seccomp in (True, False):  # with the filter, and the PID namespace alone
        box.runner.seccomp = seccomp
        try:
            obs, reward, term, info, _ = attempt(box, program)
        finally:
            box.runner.seccomp = True
        assert_failed(obs, reward, term, info, "'NoneType' object has no attribute 'predict_proba'")
    os.kill(me, 0)  # still here


def test_bwrap_logistic_regression_on_breast_cancer(box):
    obs, reward, term, info, _ = attempt(box, LOGREG)
    assert term and info["won"] and reward > 0.9 and len(info["aucs"]) == 5
    assert abs(reward - sum(info["aucs"]) / 5) < 1e-12 and info["sandbox"] == "bwrap"
    assert obs.startswith("Code executes normally.")


def test_bwrap_deterministic_given_the_seed(box):
    # no random_state: the env's per-split seeds decide the trees
    forest = (
        "    from sklearn.ensemble import RandomForestClassifier\n"
        "    model = RandomForestClassifier(n_estimators=10)\n"
        "    model.fit(x_train, y_train)"
    )
    runs = [attempt(box, forest, target="synthetic_clusters", seed=s)[3]["aucs"] for s in (7, 7, 8)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    first = (box.reset(seed=5), list(box.seeds))
    assert (box.reset(seed=5), box.seeds) == first


# --- contract, parsing and penalties (whichever sandbox this machine has) -------------------------
@pytest.fixture(scope="module")
def env():
    e = envs.make("datasci_coding", timeout_s=10, allow_unsandboxed=True)
    yield e
    e.close()


def test_registration_targets_and_errors(env):
    assert "datasci_coding" in envs.names()
    assert env.targets == dc.TARGETS and len(dc.TARGETS) == 7
    obs, info = env.reset(seed=0, options={"target": "wine"})
    assert obs == (
        '"""Classification with a Wine Prediction Dataset"""\nimport numpy as np\n\n'
        "def build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        '    """ Import modules, return a scikit model trained with x_train in shape '
        '(89, 13) and y_train."""\n'
    )
    assert info == {"target": "wine", "won": False, "attempt": 0}
    with pytest.raises(ValueError, match="valid targets"):
        env.reset(options={"target": "titanic"})
    with pytest.raises(ValueError, match="valid options"):
        envs.make("datasci_coding", colour="red")
    with pytest.raises(ValueError, match="sandbox must be"):
        envs.make("datasci_coding", sandbox="docker")
    hidden = envs.make(
        "datasci_coding", show_name=False, targets=["iris_versicolor"], allow_unsandboxed=True
    )
    assert hidden.reset(seed=1)[0].startswith('"""Classification with a Tabular Prediction')
    assert {env.reset(seed=s)[1]["target"] for s in range(40)} == set(dc.TARGETS)


def test_datasets_are_the_documented_ones():
    shapes = {t: (dc.dataset(t)["x"].shape, dc.dataset(t)["n_classes"]) for t in dc.TARGETS}
    assert shapes == {
        "breast_cancer": ((569, 30), 2),
        "wine": ((178, 13), 3),
        "digits_odd": ((1797, 64), 2),
        "iris_versicolor": ((150, 4), 2),
        "synthetic_linear": ((800, 20), 2),
        "synthetic_clusters": ((800, 10), 2),
        "synthetic_imbalanced": ((800, 15), 2),
    }
    for t in dc.TARGETS:  # 50/50 splits
        n = len(dc.dataset(t)["x"])
        x_train, x_test, _, _ = dc.dataset(t)["splits"][0]
        assert len(x_train) == n // 2 and len(x_test) == n - n // 2


def test_sandbox_input_holds_no_test_labels(env):
    import numpy as np

    with np.load(env._data_file("iris_versicolor")) as data:
        names = [f"{k}_{i}" for k in ("x_train", "y_train", "x_test") for i in range(5)]
        assert sorted(data.files) == sorted(names)


def test_program_candidates_hand_worked():
    expected = (
        "import numpy as np\n\ndef build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        "    model = GaussianNB()\n    model.fit(x_train, y_train)\n    return model\n"
    )
    reference_form = "model = GaussianNB()\n    model.fit(x_train, y_train)"  # as after the prompt
    flat = "model = GaussianNB()\nmodel.fit(x_train, y_train)"
    indented = "        model = GaussianNB()\n        model.fit(x_train, y_train)\n"
    assert dc.program_candidates(reference_form)[0] == expected
    assert dc.program_candidates(flat)[1] == expected  # [0], the reference's form, does not compile
    assert dc.program_candidates(indented)[0] == expected
    assert dc.program_candidates("```python\n" + flat + "\n```\nThis fits it.")[1] == expected
    whole = "Here:\n```python\ndef build_model(x_train, y_train):\n    return 1\n```\nDone."
    assert dc.program_candidates(whole) == [
        "import numpy as np\n\ndef build_model(x_train, y_train):\n    return 1\n"
    ]


@pytest.mark.parametrize(
    "action, needle",
    [
        ("", "NameError: name 'model' is not defined"),
        ("x" * 10_000 + " ) (", "SyntaxError"),
        ("модель = 1 ∑ \U0001f600", "SyntaxError"),
        ("model = 1\x00", "null bytes"),
        ("\ud800 garbage", "SyntaxError"),
        (dc.BROKEN["svm"][0], "Exception: do not use SVM."),
    ],
)
def test_any_string_gets_the_penalty(env, action, needle):
    env.reset(seed=0, options={"target": "iris_versicolor"})
    obs, reward, term, trunc, info = env.step(action)
    assert reward == dc.PENALTY and not term and not trunc and needle in info["error"]
    assert len(obs) < 6000 and "Please fix it." in obs


def test_five_failures_end_the_episode(env):
    env.reset(seed=0, options={"target": "wine"})
    total = 0.0
    for k in range(1, 6):
        obs, reward, term, trunc, info = env.step("model = (")
        total += reward
        assert term == (k == 5) and info["attempt"] == k
    assert total == -5.0 and "Please fix it." in obs
    with pytest.raises(RuntimeError, match="reset"):
        env.step(LOGREG)


def test_fix_after_failure_scores_and_ends(env):
    env.reset(seed=3, options={"target": "iris_versicolor"})
    body, fix, error = dc.BROKEN["not_fitted"]
    obs, r1, term, _, info = env.step(body)
    assert r1 == -1 and error in obs and body in obs and not term
    obs, r2, term, _, info = env.step(dc.TEMPLATES[fix])
    assert term and info["won"] and 0.9 < r2 < 1.0 and info["attempt"] == 2


# --- scripted policies, datasets of episodes, corpus ---------------------------------------------
def test_scripted_policy_choices():
    failed = dc.shown_code(dc.program_candidates(dc.BROKEN["misspelt_class"][0])[0])
    retry = dc.retry_prompt("Wine", (89, 13), "NameError: x", failed)
    first = dc.prompt("Wine", (89, 13))
    assert dc.failed_template(retry) == "misspelt_class" and dc.failed_template(first) is None
    assert dc.ScriptedCoder(seed=0, p_fix=1.0).choose(retry) == "random_forest"
    best = dc.scripted_policy(mode="optimal")
    assert best(retry) == best(first) == dc.GOOD["extra_trees"]
    weak = dc.scripted_policy(seed=1)
    picks = [weak.choose(first) for _ in range(2000)]
    share = sum(p in dc.BROKEN for p in picks) / len(picks)
    assert 0.3 < share < 0.4 and set(picks) == set(dc.TEMPLATES)
    with pytest.raises(ValueError, match="mode"):
        dc.scripted_policy(mode="greedy")


def test_collect_and_load_dataset(tmp_path):
    trajs = envs.collect_scripted(
        "datasci_coding",
        2,
        seed=2,
        targets=["iris_versicolor"],
        timeout_s=10,
        allow_unsandboxed=True,
    )
    path = tmp_path / "ds.jsonl"
    envs.save_dataset(str(path), trajs)
    assert envs.load_dataset(str(path), env="datasci_coding") == trajs
    for t in trajs:
        rewards = [s["reward"] for s in t["steps"]]
        assert all(r == -1.0 for r in rewards[:-1]) and t["target"] == "iris_versicolor"
        assert t["steps"][0]["observation"].startswith('"""Classification with a Iris')
    assert json.loads(path.read_text().splitlines()[0])["env"] == "datasci_coding"


def test_make_vec_steps_copies():
    vec = envs.make_vec("datasci_coding", 2, targets=["wine"], allow_unsandboxed=True)
    obs, infos = vec.reset(seed=0)
    assert [i["target"] for i in infos] == ["wine", "wine"] and obs[0] == obs[1]
    obs, rewards, dones, infos = vec.step(["model = (", "model = ("])
    assert rewards == [-1.0, -1.0] and dones == [False, False] and "SyntaxError" in obs[0]


def test_corpus_runs_nothing_and_has_prompts_and_fixes():
    start = time.perf_counter()
    texts = envs.corpus("datasci_coding", 300)
    assert len(texts) == 300 and time.perf_counter() - start < 2
    assert any(t.startswith('"""Classification with a') and "model.fit" in t for t in texts)
    assert any("Please fix it." in t for t in texts) and texts == envs.corpus("datasci_coding", 300)


# --- failing closed: no bwrap, no model-written code, unless the caller opts in -----------------
@pytest.mark.parametrize("broken", ["missing", "cannot start"])
def test_without_a_working_bwrap_make_refuses_unless_the_caller_opts_in(broken, monkeypatch):
    """bwrap missing (not on PATH) or failing to start (simulated): make raises one line naming
    `apt-get install bubblewrap` and the opt-in; allow_unsandboxed=True, or
    TURNRL_ALLOW_UNSANDBOXED=1 (how the scripts opt in), runs a warned plain subprocess."""
    monkeypatch.setattr(dc, "_bwrap_path", lambda: None if broken == "missing" else "/bin/false")
    monkeypatch.setattr(dc, "bwrap_status", dc.bwrap_status.__wrapped__)  # not the cached answer
    monkeypatch.setattr(dc, "_warned", False)
    monkeypatch.delenv(dc.UNSANDBOXED_VAR, raising=False)
    why = "bwrap is not installed" if broken == "missing" else "bwrap failed (exit 1)"
    for options in ({}, {"allow_unsandboxed": False}, {"sandbox": "subprocess"}):
        with pytest.raises(RuntimeError, match="refusing to run model-written code") as e:
            envs.make("datasci_coding", **options)
        assert "\n" not in str(e.value) and "allow_unsandboxed=True" in str(e.value)
        assert "apt-get install bubblewrap" in str(e.value)
        assert options or why in str(e.value)
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        envs.make("datasci_coding", sandbox="bwrap", allow_unsandboxed=True)  # bwrap required
    with pytest.warns(RuntimeWarning, match="WITHOUT file-system and network-namespace"):
        env = envs.make("datasci_coding", allow_unsandboxed=True, timeout_s=10)
    assert env.sandbox == "subprocess"
    env.close()
    monkeypatch.setenv(dc.UNSANDBOXED_VAR, "1")
    env = envs.make("datasci_coding", timeout_s=10)
    env.reset(seed=0, options={"target": "iris_versicolor"})
    assert env.sandbox == "subprocess" and env.step(LOGREG)[1] > 0.5  # it runs
    env.close()
