"""DataSciCoding (POAD, Wen et al. 2024, §6, App. E): write a scikit-learn classifier for ROC AUC.

The agent sees the head of a Python function (the reference's prompt; the dataset is named but not
described, only the training matrix's shape is given) and writes its body: Python that builds a
scikit-learn model, fits it on ``x_train, y_train`` and leaves it in ``model`` (the env appends
``return model``, as the reference does). A whole program that defines
``build_model(x_train, y_train)`` is accepted too. The env runs the code on 5 random 50/50
train/test splits of the dataset and

- if it runs: reward = the mean ROC AUC over the splits (one-vs-one for more than two classes), and
  the episode ends;
- if it fails (exception, syntax error, time/memory limit, no ``predict_proba``, ...): reward = -1
  and the next observation shows the error (the innermost line of the program and the exception
  line) with the failed code and asks for a fixed version; the episode ends after ``max_attempts``
  (5) failures.

Generated code is untrusted, so it never runs in this process. Each attempt runs in a fresh sandbox
(``env.sandbox``):
- "bwrap": bubblewrap (Debian/Ubuntu package ``bubblewrap``): new user, PID, network, IPC and UTS
  namespaces; a read-only view of the system and the Python installation only (not this repository,
  not the home directory; scikit-learn's bundled dataset files are hidden, so the program cannot
  look the labels up); a private size-capped tmpfs as the only writable path; no network at all;
- "subprocess": a plain child process, without file-system and network-namespace isolation. UNSAFE
  for untrusted code, so never chosen silently: where bwrap is missing or cannot start, ``make``
  raises RuntimeError (naming ``apt-get install bubblewrap``) unless the caller opts in with
  ``allow_unsandboxed=True`` (or the environment variable ``TURNRL_ALLOW_UNSANDBOXED=1``, which is
  how the training scripts opt in); then it runs with a loud one-time warning.
In both modes ``envs/_sandbox_runner.py`` lowers the resource limits (CPU seconds, address space,
processes, file size) and installs a seccomp filter (no new processes, no signals to other
processes, no internet sockets) before the program runs, and the env enforces a wall-clock timeout.
Only the training labels enter the sandbox; the program returns class probabilities and this env
computes ROC AUC itself, so printing "AUC 1.0" or writing files cannot forge the reward.

Datasets (``targets``): tabular classification sets shipped inside scikit-learn and seeded
synthetic ones (``make_classification``); nothing is downloaded. The docs (docs/envs.md,
DataSciCoding) say where we follow the reference and where we differ.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
import weakref

import numpy as np

from .core import check_action, reset_target

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_runner.py")
PENALTY = -1.0  # the reference's constant reward for a program that fails
N_SPLITS = 5  # 5 random 50/50 splits, as the reference (and CAAFE) evaluate
SIGNATURE = "def build_model(x_train: np.ndarray, y_train: np.ndarray):"
# The reference refuses two kinds of model outright (they were too slow for it); we keep the rule.
BANNED = (("GridSearchCV(", "do not use GridSearchCV."), ("SVC(", "do not use SVM."))
_OPTIONS = {
    "targets",
    "max_attempts",
    "timeout_s",
    "cpu_s",
    "memory_mb",
    "sandbox",
    "show_name",
    "allow_unsandboxed",
}
UNSANDBOXED_VAR = "TURNRL_ALLOW_UNSANDBOXED"  # =1: the default of allow_unsandboxed is True
MAX_CODE_CHARS = 4000  # the failed code shown back to the agent is cut to this many characters


# --- datasets ------------------------------------------------------------------------------------
def _load(target: str):
    """(X, y) of a target: features, labels 0..k-1."""
    from sklearn import datasets as sk

    if target == "breast_cancer":
        d = sk.load_breast_cancer()
        return d.data, d.target
    if target == "wine":
        d = sk.load_wine()
        return d.data, d.target
    if target == "digits_odd":
        d = sk.load_digits()
        return d.data, d.target % 2
    if target == "iris_versicolor":
        d = sk.load_iris()
        return d.data, (d.target == 1).astype(int)
    make_classification = sk.make_classification
    if target == "synthetic_linear":
        return make_classification(
            800, 20, n_informative=5, n_redundant=5, flip_y=0.05, class_sep=0.8, random_state=1729
        )
    if target == "synthetic_clusters":
        return make_classification(
            800,
            10,
            n_informative=6,
            n_redundant=0,
            n_clusters_per_class=4,
            class_sep=1.5,
            flip_y=0.02,
            random_state=1730,
        )
    if target == "synthetic_imbalanced":
        return make_classification(
            800,
            15,
            n_informative=4,
            n_redundant=2,
            weights=[0.9],
            flip_y=0.02,
            class_sep=0.7,
            random_state=1731,
        )
    raise ValueError(f"unknown target {target!r}; valid targets: {TARGETS}")


# name -> title in the prompt's header ("Classification with a <title> Prediction Dataset")
TITLES = {
    "breast_cancer": "Breast Cancer",
    "wine": "Wine",
    "digits_odd": "Digits",
    "iris_versicolor": "Iris",
    "synthetic_linear": "Synthetic",
    "synthetic_clusters": "Synthetic",
    "synthetic_imbalanced": "Synthetic",
}
TARGETS = list(TITLES)


@functools.lru_cache(maxsize=None)
def dataset(target: str) -> dict:
    """The target's arrays and its 5 fixed 50/50 splits (the reference's ``random_state=i``)."""
    from sklearn.model_selection import train_test_split

    x, y = _load(target)
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)
    splits = [
        train_test_split(x, y, test_size=0.5, random_state=i, shuffle=True) for i in range(N_SPLITS)
    ]
    return {
        "x": x,
        "y": y,
        "n_classes": int(y.max()) + 1,
        "splits": splits,
        "train_shape": tuple(splits[0][0].shape),
    }


# --- turning an action into a program ------------------------------------------------------------
_FENCE = re.compile(r"```[A-Za-z0-9_+.-]*[ \t]*\n(.*?)(?:```|\Z)", re.S)
_DEF = re.compile(r"^[ \t]*def[ \t]+build_model[ \t]*\(", re.M)


def extract_code(action: str) -> str:
    """The code of an action: the inside of its first Markdown code fence if it has one, with
    Windows line ends, tabs and invalid Unicode normalised and trailing blank space removed."""
    text = action.encode("utf-8", "replace").decode("utf-8")  # lone surrogates become "?"
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    fence = _FENCE.search(text)
    if fence:
        text = fence.group(1)
    return text.expandtabs(4).rstrip()


def program_candidates(action: str) -> list[str]:
    """The programs an action may mean, most likely first (the sandbox runs the first that
    compiles).

    A whole program (it defines ``build_model``) is used as it is. Otherwise the action is the body
    of ``build_model``, placed in the reference's frame (signature, body, ``return model``) in two
    ways: the reference's own (the first line indented by 4 spaces, the others kept as they are,
    which fits a model that continued the prompt's indentation) and "dedent, then indent every line
    by 4"; the one whose first line is indented goes first."""
    code = extract_code(action)
    if _DEF.search(code):
        return ["import numpy as np\n\n" + code + "\n"]
    lines = code.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        lines = [""]
    reference = "\n".join(["    " + lines[0].lstrip()] + lines[1:])
    dedented = textwrap.indent(textwrap.dedent("\n".join(lines)), "    ", lambda s: True)
    bodies = [dedented, reference] if lines[0][:1].isspace() else [reference, dedented]
    out = []
    for body in bodies:
        program = f"import numpy as np\n\n{SIGNATURE}\n{body.rstrip()}\n    return model\n"
        if program not in out:
            out.append(program)
    return out


def shown_code(program: str) -> str:
    """The part of a program shown back to the agent (without our numpy import), cut to size."""
    prefix = "import numpy as np\n\n"
    code = (program[len(prefix) :] if program.startswith(prefix) else program).rstrip()
    return code if len(code) <= MAX_CODE_CHARS else code[:MAX_CODE_CHARS] + "\n    # ... (cut)"


# --- observations --------------------------------------------------------------------------------
def header(title: str) -> str:
    return f'"""Classification with a {title} Prediction Dataset"""\nimport numpy as np\n\n'


def doc_line(shape) -> str:
    return (
        f'    """ Import modules, return a scikit model trained with x_train in shape {shape} '
        f'and y_train."""\n'
    )


def prompt(title: str, shape) -> str:
    """The first observation: the function to complete (the reference's DS_CODE_PROMPT)."""
    return header(title) + SIGNATURE + "\n" + doc_line(shape)


def retry_prompt(title: str, shape, error: str, code: str) -> str:
    """The observation after a failure: the error, the failed code, the head of the fixed version
    (the reference's DS_CODE_REFLECTION_PROMPT)."""
    return (
        header(title)
        + '""" An error was reported while executing below function:\n'
        + error.strip()
        + '\nPlease fix it."""\n'
        + code
        + '\n\n""" Here is the fixed version of the function."""\n'
        + SIGNATURE
        + "\n"
        + doc_line(shape)
    )


# --- the sandbox ---------------------------------------------------------------------------------
_SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "JOBLIB_MULTIPROCESSING": "0",
    "MPLBACKEND": "Agg",
}
_SIGNALS = {
    signal.SIGXCPU: "the program used up its CPU time limit ({cpu_s} s)",
    signal.SIGXFSZ: "the program wrote a file larger than its limit",
    signal.SIGKILL: "the program was killed (SIGKILL)",
    signal.SIGSEGV: "the program crashed (segmentation fault)",
}
_warned = False


def _mounts_for_python() -> list[str]:
    """Directories the interpreter and its packages live in (bound read-only into the sandbox)."""
    import sklearn

    dirs = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
        os.path.dirname(os.path.dirname(np.__file__)),
        os.path.dirname(os.path.dirname(sklearn.__file__)),
    }
    dirs |= {os.path.realpath(d) for d in dirs}
    system = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # bound anyway
    covered = {d for d in dirs if d == "/" or any(d == s or d.startswith(s + "/") for s in system)}
    dirs = sorted(d for d in dirs - covered if os.path.isdir(d))
    return [d for d in dirs if not any(d.startswith(o + "/") for o in dirs)]  # outermost only


@functools.lru_cache(maxsize=1)
def _bwrap_path() -> str | None:
    """The absolute path of bwrap on this process's PATH (the sandbox gets its own PATH)."""
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def _bwrap_features() -> frozenset:
    try:
        out = subprocess.run(
            [_bwrap_path() or "bwrap", "--help"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(f for f in ("--size", "--disable-userns") if f in out.stdout + out.stderr)


def bwrap_command(binds: list[tuple[str, str]], workdir_mb: int = 64) -> list[str]:
    """The bwrap invocation (up to the command): system and Python read-only, ``binds`` (source,
    destination) read-only, a tmpfs at /sandbox as the only writable place, fresh namespaces."""
    import sklearn

    args = [
        _bwrap_path() or "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    if "--disable-userns" in _bwrap_features():
        args.append("--disable-userns")
    for d in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    for d in _mounts_for_python():
        args += ["--ro-bind", d, d]
    hidden = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "data")
    if os.path.isdir(hidden):  # the bundled dataset files: a program could look labels up there
        args += ["--tmpfs", hidden]
    for src, dst in binds:
        args += ["--ro-bind", src, dst]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if "--size" in _bwrap_features():
        args += ["--size", str(workdir_mb << 20)]
    args += [
        "--tmpfs",
        "/sandbox",
        "--chdir",
        "/sandbox",
        "--setenv",
        "HOME",
        "/sandbox",
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
    ]
    return args


@functools.lru_cache(maxsize=1)
def bwrap_status() -> tuple[bool, str]:
    """(works, why not): runs the interpreter once inside the sandbox (cached per process)."""
    if _bwrap_path() is None:
        return False, "bwrap is not installed"
    try:
        r = subprocess.run(
            bwrap_command([]) + [sys.executable, "-c", "import numpy"],
            capture_output=True,
            text=True,
            timeout=60,
            env=_SANDBOX_ENV,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"bwrap failed to start: {e}"
    if r.returncode != 0:
        return False, f"bwrap failed (exit {r.returncode}): {r.stderr.strip()[-300:]}"
    return True, ""


def choose_sandbox(requested: str = "auto", allow_unsandboxed: bool | None = None) -> str:
    """'bwrap' when it works. Otherwise the sandbox fails closed: RuntimeError, unless the caller
    opted in to running untrusted code unsandboxed (``allow_unsandboxed=True``; None reads the
    environment variable TURNRL_ALLOW_UNSANDBOXED=1), and then 'subprocess' with a warning once
    per process that isolation is off."""
    global _warned
    if requested not in ("auto", "bwrap", "subprocess"):
        raise ValueError(f"sandbox must be 'auto', 'bwrap' or 'subprocess', got {requested!r}")
    if allow_unsandboxed is None:
        allow_unsandboxed = os.environ.get(UNSANDBOXED_VAR, "") == "1"
    ok, why = (False, "sandbox='subprocess' was asked for")
    if requested != "subprocess":
        ok, why = bwrap_status()
    if ok:
        return "bwrap"
    if requested == "bwrap" or not allow_unsandboxed:
        raise RuntimeError(
            f"datasci_coding: refusing to run model-written code without the bubblewrap sandbox "
            f"({why}). Install it (Debian/Ubuntu: apt-get install bubblewrap) and let it create "
            "user namespaces; or, UNSAFE (the code can then read and write whatever this user "
            "can), opt in with allow_unsandboxed=True or, for the training scripts, "
            f"{UNSANDBOXED_VAR}=1 (docs/envs.md, DataSciCoding)"
        )
    if not _warned:
        _warned = True
        message = (
            "datasci_coding: running generated code WITHOUT file-system and "
            f"network-namespace isolation ({why}; allow_unsandboxed opted in to it); only "
            "resource limits, a seccomp filter and a timeout apply. Install bubblewrap "
            "(apt-get install bubblewrap) and let it create user namespaces for the real "
            "sandbox (docs/envs.md, DataSciCoding)."
        )
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        print(f"WARNING: {message}", file=sys.stderr)
    return "subprocess"


def _read_regular(path: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a regular file, links not followed; None if absent or odd."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _last_json(stdout: bytes) -> dict | None:
    """The runner's result: the last line of stdout that parses as a JSON object with a status."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(b'{"status"'):
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(obj, dict) and obj.get("status") in ("ok", "error"):
                return obj
    return None


class Sandbox:
    """Runs candidate programs on a dataset file in a fresh sandbox per call."""

    def __init__(self, mode: str, limits: dict, timeout_s: float):
        self.mode, self.limits, self.timeout_s = mode, dict(limits), float(timeout_s)
        self.root = tempfile.mkdtemp(prefix="turnrl-datasci-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True)
        self.runs = 0
        self.seccomp = True  # the runner's seccomp filter (tests switch it off to check the rest)

    def run(self, programs: list[str], data_path: str, n_classes: int, seeds: list[int]) -> dict:
        """{"status": "ok", "scores": [...], "program": i} or {"status": "error", "message": ...,
        "program": i}; never raises for anything the program does."""
        self.runs += 1
        run_dir = os.path.join(self.root, f"run{self.runs}")
        task = os.path.join(run_dir, "task")
        os.makedirs(task)
        try:
            return self._run(programs, data_path, n_classes, seeds, run_dir, task)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _run(self, programs, data_path, n_classes, seeds, run_dir, task) -> dict:
        inside = self.mode == "bwrap"
        for i, program in enumerate(programs):
            path = os.path.join(task, f"program_{i}.py")
            with open(path, "w", encoding="utf-8", errors="replace") as f:
                f.write(program)
        base = "/task" if inside else task
        config = {
            "data": "/data.npz" if inside else data_path,
            "n_splits": len(seeds),
            "seeds": seeds,
            "n_classes": n_classes,
            "limits": self.limits,
            "seccomp": self.seccomp,
            "programs": [f"{base}/program_{i}.py" for i in range(len(programs))],
        }
        with open(os.path.join(task, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        if inside:
            binds = [(task, "/task"), (data_path, "/data.npz"), (RUNNER, "/runner.py")]
            cmd = bwrap_command(binds)
            cmd += [sys.executable, "-B", "/runner.py", "/task/config.json"]
            cwd, env = run_dir, dict(_SANDBOX_ENV, MPLCONFIGDIR="/sandbox")
        else:
            cwd = os.path.join(run_dir, "work")
            os.makedirs(cwd)
            cmd = [sys.executable, "-B", RUNNER, os.path.join(task, "config.json")]
            env = dict(_SANDBOX_ENV, HOME=cwd, MPLCONFIGDIR=cwd)
        out_path, err_path = os.path.join(run_dir, "stdout"), os.path.join(run_dir, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            timed_out, code = self._wait(cmd, cwd, env, out, err)
        stdout = _read_regular(out_path, 32 << 20) or b""
        stderr = _read_regular(err_path, 1 << 20) or b""
        return self._result(timed_out, code, stdout, stderr)

    def _wait(self, cmd, cwd, env, out, err) -> tuple[bool, int]:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:  # the whole process group (bwrap takes its PID namespace down with it)
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        return timed_out, proc.returncode

    def _result(self, timed_out: bool, code: int, stdout: bytes, stderr: bytes) -> dict:
        if timed_out:
            message = f"TimeoutError: the program did not finish within {self.timeout_s:g} s"
            return {"status": "error", "program": 0, "message": message}
        result = _last_json(stdout)
        if result is not None:
            if result["status"] == "error":
                message = result.get("message")
                message = message[-2000:] if isinstance(message, str) else "unknown error"
                result = {
                    "status": "error",
                    "program": result.get("program", 0),
                    "message": message,
                }
            return result
        sig = -code if code < 0 else code - 128 if code > 128 else 0
        if sig in _SIGNALS:
            message = "RuntimeError: " + _SIGNALS[sig].format(**self.limits)
        elif sig:
            message = f"RuntimeError: the program was killed by signal {sig}"
        else:
            message = f"RuntimeError: the program exited (status {code}) without predictions"
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        if tail:
            message += "\n" + "\n".join(line[:200] for line in tail)
        return {"status": "error", "program": 0, "message": message}

    def close(self):
        self._cleanup()


def roc_auc(y_true: np.ndarray, scores, n_classes: int) -> float:
    """ROC AUC of class-probability scores: column 1 for two classes, one-vs-one otherwise."""
    from sklearn.metrics import roc_auc_score

    p = np.asarray(scores, dtype=np.float64)
    if p.shape != (len(y_true), n_classes):
        expected = (len(y_true), n_classes)
        raise ValueError(f"predict_proba returned shape {p.shape}, expected {expected}")
    if not np.isfinite(p).all():
        raise ValueError("predict_proba returned NaN or infinite values")
    if n_classes == 2:
        return float(roc_auc_score(y_true, p[:, 1]))
    return float(roc_auc_score(y_true, p, multi_class="ovo", labels=list(range(n_classes))))


# --- the environment -----------------------------------------------------------------------------
class DataSciCodingEnv:
    """Gymnasium-style env on strings; one dataset per episode, up to ``max_attempts`` programs."""

    def __init__(
        self,
        targets=None,
        max_attempts: int = 5,
        timeout_s: float = 30.0,
        cpu_s=None,
        memory_mb: int = 2048,
        sandbox: str = "auto",
        show_name: bool = True,
        allow_unsandboxed: bool | None = None,
    ):
        self.targets = list(targets) if targets else list(TARGETS)
        for t in self.targets:
            if t not in TITLES:
                raise ValueError(f"datasci_coding: unknown target {t!r}; valid targets: {TARGETS}")
        if max_attempts < 1 or timeout_s <= 0 or memory_mb < 256:
            raise ValueError(
                "datasci_coding: need max_attempts >= 1, timeout_s > 0 and memory_mb >= 256"
            )
        self.name, self.max_attempts = "datasci_coding", int(max_attempts)
        self.show_name = bool(show_name)
        self.sandbox = choose_sandbox(sandbox, allow_unsandboxed)
        cpu = int(cpu_s) if cpu_s else max(2, int(2 * timeout_s))
        limits = {"cpu_s": cpu, "memory_mb": int(memory_mb), "nproc": 64, "fsize_mb": 64}
        self.runner = Sandbox(self.sandbox, limits, timeout_s)
        self.rng = random.Random()
        self.target, self.obs, self.attempt, self.done, self.seeds = None, "", 0, True, []
        self._data_files: dict[str, str] = {}

    def title(self, target: str) -> str:
        return TITLES[target] if self.show_name else "Tabular"

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode on ``options["target"]`` or a dataset drawn with the env's RNG; the seed
        also fixes the seeds of ``random``/``numpy`` inside the sandbox (one per split)."""
        if seed is not None:
            self.rng.seed(seed)
        target = reset_target(self.name, options, self.targets)
        if target is None:
            target = self.rng.choice(self.targets)
        self.target, self.attempt, self.done = target, 0, False
        self.seeds = [self.rng.randrange(2**31) for _ in range(N_SPLITS)]
        self.obs = prompt(self.title(target), dataset(target)["train_shape"])
        return self.obs, {"target": target, "won": False, "attempt": 0}

    def _data_file(self, target: str) -> str:
        """The target's sandbox input (training features and labels, test features), written
        once per env; the test labels stay in this process."""
        if target not in self._data_files:
            arrays = {}
            for i, (x_train, x_test, y_train, _) in enumerate(dataset(target)["splits"]):
                arrays.update(
                    {f"x_train_{i}": x_train, f"y_train_{i}": y_train, f"x_test_{i}": x_test}
                )
            path = os.path.join(self.runner.root, f"data-{target}.npz")
            np.savez(path, **arrays)
            self._data_files[target] = path
        return self._data_files[target]

    def evaluate(self, action: str) -> dict:
        """Run an action's program; {"auc", "aucs", "error", "program"} (error None on success)."""
        programs = program_candidates(action)
        for needle, message in BANNED:
            if needle in programs[0]:
                return {
                    "auc": None,
                    "aucs": [],
                    "error": f"Exception: {message}",
                    "program": programs[0],
                }
        data = dataset(self.target)
        result = self.runner.run(
            programs, self._data_file(self.target), data["n_classes"], self.seeds
        )
        index = result.get("program", 0)
        ok_index = isinstance(index, int) and 0 <= index < len(programs)
        program = programs[index] if ok_index else programs[0]
        if result["status"] != "ok":
            return {"auc": None, "aucs": [], "error": result["message"], "program": program}
        try:
            scores = result.get("scores")
            if not isinstance(scores, list) or len(scores) != len(data["splits"]):
                raise ValueError("the program returned no predictions for some splits")
            aucs = [
                roc_auc(split[3], s, data["n_classes"]) for split, s in zip(data["splits"], scores)
            ]
        except Exception as e:  # noqa: BLE001 -- whatever came back, it is the program's failure
            error = f"{type(e).__name__}: {e}"[:2000]
            return {"auc": None, "aucs": [], "error": error, "program": program}
        return {"auc": float(np.mean(aucs)), "aucs": aucs, "error": None, "program": program}

    def step(self, action: str):
        """Run one program. Returns (obs, reward, terminated, truncated, info)."""
        check_action(self.name, action)
        if self.done:
            raise RuntimeError(
                f"{self.name}: step() called on a finished episode; call reset() first"
            )
        if not isinstance(action, str):
            action = str(action)
        start = time.perf_counter()
        res = self.evaluate(action)
        self.attempt += 1
        won = res["error"] is None
        info = {
            "target": self.target,
            "won": won,
            "attempt": self.attempt,
            "auc": res["auc"],
            "aucs": res["aucs"],
            "error": res["error"],
            "sandbox": self.sandbox,
            "seconds": time.perf_counter() - start,
        }
        if won:
            self.done, reward = True, res["auc"]
            self.obs = f"Code executes normally. Mean ROC AUC over {N_SPLITS} splits: {reward:.4f}"
        else:
            self.done, reward = self.attempt >= self.max_attempts, PENALTY
            self.obs = retry_prompt(
                self.title(self.target),
                dataset(self.target)["train_shape"],
                res["error"],
                shown_code(res["program"]),
            )
        return self.obs, reward, self.done, False, info

    def close(self):
        self.runner.close()


def make(**options) -> DataSciCodingEnv:
    """Options: ``targets`` (subset of TARGETS), ``max_attempts`` (5), ``timeout_s`` (30, wall
    clock per program), ``cpu_s`` (2 x timeout), ``memory_mb`` (2048, address space), ``sandbox``
    ("auto": bwrap when it works; "bwrap" to require it; "subprocess"), ``show_name`` (True: the
    header names the dataset as the reference's does; False: "Tabular"), ``allow_unsandboxed``
    (False, or True with TURNRL_ALLOW_UNSANDBOXED=1 in the environment: without a working bwrap
    ``make`` raises RuntimeError; True, UNSAFE, runs the code in a plain subprocess instead)."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(
            f"unknown option(s) {sorted(unknown)} for env 'datasci_coding'; "
            f"valid options: {sorted(_OPTIONS)}"
        )
    return DataSciCodingEnv(**options)


# --- scripted policies ---------------------------------------------------------------------------
def _body(*lines: str) -> str:
    return "\n".join("    " + line for line in lines)


# Programs that run: strong ones and weak ones (their AUC per dataset is tabled in the docs).
GOOD = {
    "extra_trees": _body(
        "from sklearn.ensemble import ExtraTreesClassifier",
        "model = ExtraTreesClassifier(n_estimators=300, random_state=0)",
        "model.fit(x_train, y_train)",
    ),
    "random_forest": _body(
        "from sklearn.ensemble import RandomForestClassifier",
        "model = RandomForestClassifier(n_estimators=100)",
        "model.fit(x_train, y_train)",
    ),
    "gradient_boosting": _body(
        "from sklearn.ensemble import HistGradientBoostingClassifier",
        "model = HistGradientBoostingClassifier()",
        "model.fit(x_train, y_train)",
    ),
    "knn_scaled": _body(
        "from sklearn.pipeline import make_pipeline",
        "from sklearn.preprocessing import StandardScaler",
        "from sklearn.neighbors import KNeighborsClassifier",
        "model = make_pipeline(StandardScaler(),",
        "                      KNeighborsClassifier(n_neighbors=15))",
        "model.fit(x_train, y_train)",
    ),
    "logistic_regression": _body(
        "from sklearn.pipeline import make_pipeline",
        "from sklearn.preprocessing import StandardScaler",
        "from sklearn.linear_model import LogisticRegression",
        "model = make_pipeline(StandardScaler(),",
        "                      LogisticRegression(max_iter=1000))",
        "model.fit(x_train, y_train)",
    ),
}
WEAK = {
    "naive_bayes": _body(
        "from sklearn.naive_bayes import GaussianNB",
        "model = GaussianNB()",
        "model.fit(x_train, y_train)",
    ),
    "logistic_raw": _body(
        "from sklearn.linear_model import LogisticRegression",
        "model = LogisticRegression(max_iter=100)",
        "model.fit(x_train, y_train)",
    ),
    "nearest_neighbour": _body(
        "from sklearn.neighbors import KNeighborsClassifier",
        "model = KNeighborsClassifier(n_neighbors=1)",
        "model.fit(x_train, y_train)",
    ),
    "decision_stump": _body(
        "from sklearn.tree import DecisionTreeClassifier",
        "model = DecisionTreeClassifier(max_depth=1)",
        "model.fit(x_train, y_train)",
    ),
    "constant": _body(
        "from sklearn.dummy import DummyClassifier",
        "model = DummyClassifier(strategy='prior')",
        "model.fit(x_train, y_train)",
    ),
}
# Programs that fail: name -> (body, the runnable template that fixes it, the error the env reports)
BROKEN = {
    "misspelt_class": (
        _body(
            "from sklearn.ensemble import RandomForestClassifier",
            "model = RandomForestClassifer(n_estimators=100)",
            "model.fit(x_train, y_train)",
        ),
        "random_forest",
        "NameError: name 'RandomForestClassifer' is not defined",
    ),
    "missing_import": (
        _body("model = LogisticRegression(max_iter=1000)", "model.fit(x_train, y_train)"),
        "logistic_raw",
        "NameError: name 'LogisticRegression' is not defined",
    ),
    "not_fitted": (
        _body("from sklearn.naive_bayes import GaussianNB", "model = GaussianNB()"),
        "naive_bayes",
        "sklearn.exceptions.NotFittedError: This GaussianNB instance is not fitted yet.",
    ),
    "wrong_variable": (
        _body(
            "from sklearn.neighbors import KNeighborsClassifier",
            "model = KNeighborsClassifier(n_neighbors=15)",
            "model.fit(X_train, y_train)",
        ),
        "knn_scaled",
        "NameError: name 'X_train' is not defined",
    ),
    "regressor": (
        _body(
            "from sklearn.linear_model import LinearRegression",
            "model = LinearRegression()",
            "model.fit(x_train, y_train)",
        ),
        "logistic_regression",
        "AttributeError: 'LinearRegression' object has no attribute 'predict_proba'",
    ),
    "svm": (
        _body("from sklearn.svm import SVC", "model = SVC()", "model.fit(x_train, y_train)"),
        "gradient_boosting",
        "Exception: do not use SVM.",
    ),
    "unclosed_paren": (
        _body(
            "from sklearn.ensemble import HistGradientBoostingClassifier",
            "model = HistGradientBoostingClassifier(max_iter=200",
            "model.fit(x_train, y_train)",
        ),
        "gradient_boosting",
        "SyntaxError: '(' was never closed",
    ),
}
RUNNABLE = {**GOOD, **WEAK}
TEMPLATES = {**RUNNABLE, **{name: body for name, (body, _, _) in BROKEN.items()}}
MODES = ("suboptimal", "optimal")
BEST = "extra_trees"


def failed_template(obs: str) -> str | None:
    """The broken template whose code a retry observation shows, if any."""
    if "An error was reported" not in obs:
        return None
    return next((name for name, (body, _, _) in BROKEN.items() if body in obs), None)


class ScriptedCoder:
    """``mode="suboptimal"`` (the data policy): the first program is a broken template with
    probability ``p_broken`` and otherwise a runnable one (strong or weak), uniformly; after a
    failure it writes the fix of the broken template it recognises with probability ``p_fix`` and
    otherwise samples afresh. ``mode="optimal"``: always the strongest template (extra trees)."""

    def __init__(
        self, seed: int = 0, mode: str = "suboptimal", p_broken: float = 0.35, p_fix: float = 0.7
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode, self.p_broken, self.p_fix = mode, p_broken, p_fix
        self.rng = random.Random(seed)

    def sample(self) -> str:
        pool = sorted(BROKEN) if self.rng.random() < self.p_broken else sorted(RUNNABLE)
        return self.rng.choice(pool)

    def choose(self, obs: str) -> str:
        """The name of the template to write next."""
        if self.mode == "optimal":
            return BEST
        failed = failed_template(obs)
        if failed is not None and self.rng.random() < self.p_fix:
            return BROKEN[failed][1]
        return self.sample()

    def __call__(self, obs: str) -> str:
        return TEMPLATES[self.choose(obs)]


def scripted_policy(seed: int = 0, mode: str = MODES[0], **options) -> ScriptedCoder:
    """A scripted coder (env options are accepted and ignored: it only reads the observation)."""
    return ScriptedCoder(seed=seed, mode=mode)


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` sample texts without running anything: prompts followed by a program, retry prompts
    (with the broken templates' known errors) followed by their fix, and bare programs."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        target = TARGETS[i % len(TARGETS)]
        title, shape = TITLES[target], dataset(target)["train_shape"]
        kind = i % 3
        if kind == 0:
            texts.append(prompt(title, shape) + TEMPLATES[rng.choice(sorted(TEMPLATES))])
        elif kind == 1:
            name = rng.choice(sorted(BROKEN))
            body, fix, error = BROKEN[name]
            program = f"{SIGNATURE}\n{body}\n    return model"
            texts.append(retry_prompt(title, shape, error, program) + TEMPLATES[fix])
        else:
            texts.append(TEMPLATES[rng.choice(sorted(TEMPLATES))])
    return texts
