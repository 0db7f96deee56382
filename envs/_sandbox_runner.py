"""Runs one untrusted DataSciCoding program inside the sandbox; started by envs/datasci_coding.py.

    python -B _sandbox_runner.py CONFIG.json

This file is trusted code that runs *before* the program, in the same process, so it is standalone
(nothing imported from ``envs``). In order, it
1. lowers the resource limits (CPU seconds, address space, processes/threads, file size, no core
   files): a process can lower its limits but not raise them back without privileges;
2. installs a seccomp filter (x86-64 and aarch64 Linux) that refuses to create processes (threads
   are allowed), to signal any other process, to open non-Unix sockets, to ptrace, to enter or
   create namespaces and to use io_uring; this is what stops a fork bomb where the kernel ignores
   RLIMIT_NPROC (a sandbox started by root keeps kernel uid 0, which that limit exempts);
3. compiles the candidate wrappings of the agent's code and keeps the first that compiles;
4. runs it: for each train/test split, ``build_model(x_train, y_train)`` then
   ``model.predict_proba(x_test)``; only training labels are in the data file;
5. writes one JSON line to the *original* stdout: {"status": "ok", "program": i, "scores": [...]} or
   {"status": "error", "program": i, "message": "..."}. The program's own prints go to stderr.

The parent trusts nothing of this output beyond "here are some scores": it computes ROC AUC itself
against held-out labels that never enter the sandbox, so a program that prints or writes a fake
result can at most claim scores, which are then graded like any others.
"""

import json
import linecache
import os
import random
import resource
import sys
import traceback

MAIN_PID = os.getpid()
_RESERVE = bytearray(16 << 20)  # freed on failure so a memory bomb still gets its error reported


def set_limits(limits: dict) -> None:
    """Lower soft and hard limits together (so the program cannot raise them again)."""
    cpu = int(limits["cpu_s"])
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 2)),
        (resource.RLIMIT_AS, (int(limits["memory_mb"]) << 20,) * 2),
        (resource.RLIMIT_NPROC, (int(limits["nproc"]),) * 2),
        (resource.RLIMIT_FSIZE, (int(limits["fsize_mb"]) << 20,) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    for which, (soft, hard) in pairs:
        old_soft, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            hard = min(hard, old_hard)
        resource.setrlimit(which, (min(soft, hard), hard))


# --- seccomp -------------------------------------------------------------------------------------
# syscall numbers: x86-64 (AUDIT_ARCH 0xC000003E) and aarch64 (0xC00000B7)
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NR = {
    "x86_64": dict(
        fork=57,
        vfork=58,
        clone=56,
        clone3=435,
        kill=62,
        tkill=200,
        tgkill=234,
        rt_sigqueueinfo=129,
        rt_tgsigqueueinfo=297,
        pidfd_send_signal=424,
        socket=41,
        ptrace=101,
        process_vm_readv=310,
        process_vm_writev=311,
        unshare=272,
        setns=308,
        io_uring_setup=425,
    ),
    "aarch64": dict(
        clone=220,
        clone3=435,
        kill=129,
        tkill=130,
        tgkill=131,
        rt_sigqueueinfo=138,
        rt_tgsigqueueinfo=240,
        pidfd_send_signal=424,
        socket=198,
        ptrace=117,
        process_vm_readv=270,
        process_vm_writev=271,
        unshare=97,
        setns=268,
        io_uring_setup=425,
    ),
}
_ALLOW, _ERRNO, _EPERM, _ENOSYS = 0x7FFF0000, 0x00050000, 1, 38
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_CLONE_THREAD, _AF_UNIX = 0x00010000, 1


def _filter(arch: str, pid: int) -> list:
    """The BPF program as (code, jt, jf, k) tuples; every block after a syscall match returns."""
    deny = [(_RET, 0, 0, _ERRNO | _EPERM)]

    def arg0_is(value):  # allow when the first argument (low 32 bits) equals value
        return [(_LD_W_ABS, 0, 0, 16), (_JEQ, 0, 1, value), (_RET, 0, 0, _ALLOW)] + deny

    thread_only = [(_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, _CLONE_THREAD), (_RET, 0, 0, _ALLOW)]
    blocks = {
        "clone": thread_only + deny,
        "clone3": [(_RET, 0, 0, _ERRNO | _ENOSYS)],  # glibc then falls back to clone
        "kill": arg0_is(pid),
        "tgkill": arg0_is(pid),
        "socket": arg0_is(_AF_UNIX),
    }
    prog = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, _ARCH[arch])] + deny
    prog += [(_LD_W_ABS, 0, 0, 0), (_JGE, 0, 1, 0x40000000)] + deny  # x32 system calls
    for name, nr in _NR[arch].items():
        block = blocks.get(name, deny)
        prog += [(_JEQ, 0, len(block), nr)] + block
    return prog + [(_RET, 0, 0, _ALLOW)]


def install_seccomp() -> str:
    """Install the filter on this (still single-threaded) process; "" or why it is not on."""
    import ctypes
    import platform

    arch = platform.machine()
    if arch not in _NR or not sys.platform.startswith("linux"):
        return f"seccomp filter not available on {sys.platform}/{arch}"

    class SockFilter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    prog = _filter(arch, os.getpid())
    array = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), array)
    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong
    if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        return f"prctl(NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}"
    if libc.prctl(22, ulong(2), ctypes.byref(fprog), ulong(0), ulong(0)) != 0:  # SECCOMP filter
        return f"prctl(SECCOMP) failed: errno {ctypes.get_errno()}"
    return ""


# --- running the program -------------------------------------------------------------------------
def error_text(exc: BaseException, max_chars: int = 1200) -> str:
    """The innermost frame of the agent's program (file "program.py") and the exception line(s)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "program.py"]
    lines = []
    if frames:
        lines = traceback.format_list(frames[-1:])
    lines += traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).rstrip()
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def pick_program(paths: list) -> tuple:
    """(index, code object) of the first candidate that compiles; raises the first one's error."""
    first_error = None
    for i, path in enumerate(paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            source = f.read()
        try:
            code = compile(source, "program.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
            first_error = first_error or e
            continue
        linecache.cache["program.py"] = (len(source), None, source.splitlines(True), "program.py")
        return i, code
    raise first_error


def run(config: dict, state: dict) -> list:
    """Fit and score on every split; returns the list of score matrices (lists of lists)."""
    state["program"], code = pick_program(config["programs"])
    import numpy as np

    with np.load(config["data"], allow_pickle=False) as data:
        splits = [
            (data[f"x_train_{i}"], data[f"y_train_{i}"], data[f"x_test_{i}"])
            for i in range(int(config["n_splits"]))
        ]
    namespace = {"__name__": "program", "__builtins__": __builtins__}
    exec(code, namespace)
    if not callable(namespace.get("build_model")):
        raise NameError("the program does not define a function build_model(x_train, y_train)")
    out = []
    for (x_train, y_train, x_test), seed in zip(splits, config["seeds"]):
        random.seed(seed)
        np.random.seed(seed)
        model = namespace["build_model"](x_train.copy(), y_train.copy())
        if os.getpid() != MAIN_PID:
            os._exit(0)
        proba = np.asarray(model.predict_proba(x_test.copy()), dtype=np.float64)
        if proba.shape != (len(x_test), int(config["n_classes"])):
            raise ValueError(
                f"predict_proba returned shape {proba.shape}, expected "
                f"({len(x_test)}, {config['n_classes']}) (one column per class)"
            )
        out.append(proba.tolist())
    return out


def main() -> None:
    global _RESERVE
    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    set_limits(config["limits"])
    note = install_seccomp() if config.get("seccomp", True) else "seccomp disabled"
    if note:
        print(f"[sandbox runner] {note}", file=sys.stderr)
    result_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the program prints goes to stderr
    state = {"program": 0}
    try:
        result = {"status": "ok", "scores": run(config, state)}
    except BaseException as e:  # SystemExit and KeyboardInterrupt from the program are failures too
        _RESERVE = None
        if os.getpid() != MAIN_PID:
            os._exit(1)
        result = {"status": "error", "message": error_text(e)}
    if os.getpid() != MAIN_PID:
        os._exit(0)
    result["program"] = state["program"]
    payload = memoryview((json.dumps(result) + "\n").encode())
    while payload:
        payload = payload[os.write(result_fd, payload) :]
    os._exit(0)


if __name__ == "__main__":
    main()
