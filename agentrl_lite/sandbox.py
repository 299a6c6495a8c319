"""The sandbox (part of the tools stage): run model-written Python in an isolated process and turn
whatever happens into an observation string.

Why this matters in agentic RL: the policy writes arbitrary code, thousands of times per run, and early
in training much of it is garbage — infinite loops, 10 GB allocations, `os.fork()` in a loop, a stray
`rm`. A training run must survive every one of those samples, and a rollout must get back *text* it
can feed to the model as the tool's reply ("Error: timed out after 5.0 s"), never an exception that
kills the trainer. So every call runs in a separate process, under limits, and everything it does is
reported as an observation:

    normal run         what the code printed, as is ("(no output)" when it printed nothing)
    stderr             appended after a "[stderr]" label (tracebacks show only the cell's own frames)
    limits and crashes a last line "Error: ..." (timed out, memory limit, killed by signal SIGSEGV, ...)

Limits in force (module constants below): wall-clock TIMEOUT_S per call (the process tree is killed),
CPU seconds (timeout_s + 1 per call), MEMORY_MB of address space, MAX_PROCESSES processes and threads,
MAX_FILE_BYTES per written file, MAX_OPEN_FILES descriptors, no network, a scrubbed environment (PATH,
HOME, LANG and thread counts only: no secret of the parent leaks), and MAX_OUTPUT_CHARS per stream.

Three backends, chosen once per process: bwrap when it works, else unshare; force one with
AGENTRL_SANDBOX=bwrap|unshare|rlimit.

The code never sees the host's own folders under bwrap and unshare: its filesystem is a read-only root that
holds only the interpreter (its base installation; of a virtual environment only pyvenv.cfg, bin/ and lib/),
SYSTEM_PATHS (/usr, /bin, /lib*, the /etc files the loader, time zones and user lookups read), a minimal
/dev, /proc, and a private /tmp. A checkout (its data/ with gold answers, notebooks, .git), home directories,
sockets and keys are absent, wherever they are on the host; so is this package (the worker,
`agentrl_lite/sandbox_worker.py`, is passed as the interpreter's -c program).

- ``bwrap`` (bubblewrap, Debian package ``bubblewrap``): new pid, network, ipc and uts namespaces; that
  filesystem, with /tmp (working directory /tmp/work) a WORKDIR_MB tmpfs, the only writable place, that
  vanishes with the sandbox; killing the sandbox kills every process in it.
- ``unshare`` (util-linux, on every Linux; no root needed where user namespaces are allowed): the same
  filesystem without bubblewrap. ``unshare`` starts the worker in new mount, pid, network, ipc and uts
  namespaces (and a user namespace when not root); the worker, while it holds the capabilities of its own
  mount namespace, builds that root on a tmpfs (read-only bind mounts, made read-only with mount_setattr,
  Linux 5.12+), switches to it and detaches the host's root (pivot_root), then gives up every capability
  before the first cell. /dev and /proc are read-only (the host's null, zero, full, random, urandom and tty;
  a fresh /proc).
- ``rlimit`` (an explicit opt-out, warned about): the same rlimits, plus ``unshare`` for network and pid
  namespaces when it is permitted. The host filesystem is protected only by ordinary file permissions (the
  code can write wherever its uid can, /tmp included); the working directory is a fresh host temporary
  directory, deleted afterwards. Without namespaces, run as a normal user, it cannot stop the code from
  signalling the user's other processes or reaching the network.

A backend is chosen only if a real worker started with it delivers what it promises (a read-only root and
a writable working directory). Where neither bwrap nor unshare can (no user namespaces, macOS), running
code raises SandboxUnavailableError, which says how to get isolation (apt install bubblewrap); only
AGENTRL_SANDBOX=rlimit runs the code anyway.

When the parent runs as root (containers, CI images), the code runs as a fresh throwaway uid: root
ignores RLIMIT_NPROC and can read /etc/shadow, a throwaway uid cannot, and no other process shares its
process count. If that uid cannot read the interpreter's directory (an interpreter under /root), the
rlimit backend preloads common standard-library modules before dropping privileges; other imports fail.

`run_command` runs any program (a compiler, the kernel harness) in the same backends, with an allow-list view:
SYSTEM_PATHS and the files it is given read-only, one scratch folder read-write, no capabilities.

Persistent sessions (`PythonSession`) keep one worker process alive inside the sandbox: it reads cells
over a pipe and `exec`s them in one namespace, so variables survive between turns of an episode. A cell
that times out or crashes the worker ends that process; the next call starts a fresh one, and the
observation says the state is gone. Processes a cell starts are stopped when the cell ends (where the
sandbox can tell them apart from the host's: a pid namespace or a throwaway uid).
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import random
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 5.0  # wall-clock seconds per call; the whole process tree is killed after it
MEMORY_MB = 512  # address space per process (RLIMIT_AS): a big allocation raises MemoryError
MAX_PROCESSES = 32  # processes + threads of the sandboxed code (RLIMIT_NPROC): contains fork bombs
MAX_FILE_BYTES = 2 * 1024 * 1024  # largest file the code may write (RLIMIT_FSIZE)
MAX_OPEN_FILES = 64  # open file descriptors per process (RLIMIT_NOFILE)
MAX_CPU_S = 600  # CPU seconds a worker may use over a whole session (hard RLIMIT_CPU)
WORKDIR_MB = 64  # size of the private /tmp of bwrap and unshare (a tmpfs, so it costs memory, not disk)
MAX_OUTPUT_CHARS = 4000  # characters kept from each of stdout (its head) and stderr (its tail)
START_TIMEOUT_S = 15.0  # seconds the sandbox may take to start before the call reports an error

PRIVATE_WORKDIR = "/tmp/work"  # the working directory under bwrap and unshare, in their private /tmp
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",  # programs, shared libraries
                "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",  # where the loader finds libraries
                "/etc/alternatives", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
                "/etc/hosts")  # with the interpreter, all of the host that bwrap and unshare show (read-only)
PRELOAD = ("bisect", "collections", "ctypes", "dataclasses", "datetime", "decimal", "encodings.idna",
           "fractions", "functools", "heapq", "itertools", "json", "math", "operator", "random", "re",
           "socket", "statistics", "string", "subprocess", "textwrap", "threading", "typing")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
ERRNO_HINTS = {  # errno of an OSError raised by the code → the limit it ran into
    27: f"Error: file size limit exceeded ({MAX_FILE_BYTES // 2**20} MB)",  # EFBIG
    24: f"Error: open-file limit reached ({MAX_OPEN_FILES} files)",  # EMFILE
}

# The worker (agentrl_lite/sandbox_worker.py) runs inside the sandbox as `python -I -u -c <its text>`, under a
# first comment line naming it: the tag finds leftover workers among the host's processes.
_WORKER_TAG = "agentrl_lite-sandbox-worker"


@functools.cache
def _worker_source() -> str:
    """The worker's program text, passed on the command line: the sandbox shows no file of this package."""
    return Path(__file__).with_name("sandbox_worker.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Backend:
    """How sandboxed code is started on this machine (see the module docstring)."""

    name: str
    """which isolation is used: bwrap, unshare or rlimit"""
    prefix: tuple[str, ...]
    """command placed before the interpreter (bwrap or unshare and their options; may be empty)"""
    private_filesystem: bool
    """the code sees only the interpreter and SYSTEM_PATHS, read-only, and a private /tmp"""
    network_isolated: bool
    """the code runs in its own network namespace: sockets cannot reach the host or the internet"""
    pid_namespace: bool
    """the code runs in its own pid namespace: it cannot see host processes, and all its processes die
    with the sandbox"""
    separate_uid: bool
    """we are root, so the code runs as a fresh unprivileged uid"""


class SandboxUnavailableError(RuntimeError):
    """No backend can isolate model-written code on this machine, and AGENTRL_SANDBOX does not opt out."""


BACKENDS = ("bwrap", "unshare", "rlimit")  # the values of AGENTRL_SANDBOX; auto tries the first two in order


def get_backend() -> Backend:
    """The backend used on this machine: AGENTRL_SANDBOX (bwrap|unshare|rlimit) when set, else bwrap, else
    unshare. Raises SandboxUnavailableError, saying how to get isolation, when the chosen one cannot run."""
    backend = _select_backend(os.environ.get("AGENTRL_SANDBOX", "auto"))
    if isinstance(backend, str):
        raise SandboxUnavailableError(backend)
    return backend


@functools.cache
def _select_backend(requested: str) -> Backend | str:
    """The backend for AGENTRL_SANDBOX=`requested`, or why none can contain the code (probed and warned
    about once per process)."""
    if requested not in ("auto", *BACKENDS):
        raise ValueError(f"AGENTRL_SANDBOX={requested!r}: use 'bwrap', 'unshare', 'rlimit', or leave it unset")
    root = os.geteuid() == 0
    if requested == "rlimit":
        warnings.warn("AGENTRL_SANDBOX=rlimit: model-written code runs without filesystem isolation (it can "
                      "write wherever this user can, /tmp included); for isolation unset AGENTRL_SANDBOX and "
                      "install bubblewrap (apt install bubblewrap)", RuntimeWarning, stacklevel=4)
        return _rlimit_backend(root)
    problems = []
    for name, make in (("bwrap", _bwrap_backend), ("unshare", _unshare_backend)):
        if requested not in ("auto", name):
            continue
        if not shutil.which(name):
            problems.append(f"{name} not found")
            continue
        backend = make(root)
        error = _probe(backend)
        if error is None:
            return backend
        problems.append(f"{name} cannot create a sandbox here ({error})")
    forced = "" if requested == "auto" else f"AGENTRL_SANDBOX={requested}: "
    return (f"{forced}no sandbox can isolate model-written Python on this machine ({'; '.join(problems)}). "
            "Install bubblewrap (apt install bubblewrap) or enable unprivileged user namespaces for unshare "
            "(Linux only: on macOS use a Linux VM or container); AGENTRL_SANDBOX=rlimit runs the code anyway, "
            "without filesystem isolation (unsafe)")


def _bwrap_backend(root: bool) -> Backend:
    return Backend("bwrap", _bwrap_prefix(root), private_filesystem=True, network_isolated=True,
                   pid_namespace=True, separate_uid=root)


def _unshare_backend(root: bool) -> Backend:
    """New mount, pid, network, ipc and uts namespaces (and a user namespace, whose root we are, when not
    root); the worker builds the private filesystem itself (`contain` in the worker source)."""
    user = () if root else ("--user", "--map-root-user")
    namespaces = ("--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--ipc", "--uts")
    return Backend("unshare", ("unshare", *user, *namespaces, "--"), private_filesystem=True,
                   network_isolated=True, pid_namespace=True, separate_uid=root)


def _rlimit_backend(root: bool) -> Backend:
    """The opt-out: rlimits, plus network and pid namespaces where unshare may create them."""
    candidates = (Backend("rlimit", prefix, private_filesystem=False, network_isolated="--net" in prefix,
                          pid_namespace="--pid" in prefix, separate_uid=root)
                  for prefix in [*_unshare_prefixes(root), ()])
    return next(backend for backend in candidates if not backend.prefix or _probe(backend) is None)


def _bwrap_prefix(root: bool) -> tuple[str, ...]:
    """A read-only root holding only `_visible_paths`, a private /tmp (size-capped when bwrap supports
    --size) with the working directory, a minimal /dev and a fresh /proc."""
    size = ("--size", str(WORKDIR_MB * 2**20)) if _bwrap_supports_size() else ()
    args = ["bwrap", "--perms", "1777", *size, "--tmpfs", "/tmp", "--perms", "1777", "--dir", PRIVATE_WORKDIR]
    args += _bwrap_binds(*_visible_paths())
    args += ["--dev", "/dev", "--proc", "/proc", "--chdir", PRIVATE_WORKDIR, "--remount-ro", "/dev",
             "--remount-ro", "/"]  # only /tmp stays writable: a tmpfs fills memory, so only one, capped
    if root:  # no user namespace: the worker needs CAP_SETUID/SETGID to become a throwaway uid, then none
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-all"]
    return (*args, "--die-with-parent", "--new-session", "--")


def _bwrap_binds(binds: list[str], symlinks: dict[str, str], writable: str | None = None) -> list[str]:
    """bwrap options showing `binds` read-only (and `writable` read-write) at their host paths, with the
    symlinks recreated and every folder on the way made traversable."""
    args: list[str] = []
    created = {"/", "/tmp"}
    for path in [*symlinks, *binds, *([writable] if writable else [])]:
        ancestors = []
        parent = os.path.dirname(path)
        while parent not in created:
            ancestors.append(parent)
            parent = os.path.dirname(parent)
        for ancestor in reversed(ancestors):  # bwrap would create them 0700: the throwaway uid needs x
            args += ["--perms", "0755", "--dir", ancestor]
            created.add(ancestor)
        if path in symlinks:
            args += ["--symlink", symlinks[path], path]
        else:
            args += ["--bind" if path == writable else "--ro-bind", path, path]
    return args


@functools.cache
def _bwrap_supports_size() -> bool:
    try:
        help_text = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in help_text


def _interpreter_paths() -> set[str]:
    """The interpreter's own files: its base installation whole, and of a virtual environment only
    pyvenv.cfg, bin/ and lib/ (never the folder holding it, which may be a checkout with its data)."""
    paths = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    for prefix in {sys.prefix, sys.exec_prefix} - {sys.base_prefix, sys.base_exec_prefix}:
        paths |= {os.path.join(prefix, name) for name in ("pyvenv.cfg", "bin", "lib", sys.platlibdir)}
    return {os.path.abspath(p) for p in paths} | {os.path.realpath(p) for p in paths}


def _visible_paths(paths: tuple[str, ...] | None = None) -> tuple[list[str], dict[str, str]]:
    """What bwrap and unshare show of the host, read-only and at the same paths: `paths` that exist here
    (by default SYSTEM_PATHS and the interpreter's files). Returns (paths to bind, outermost first, none
    inside another; symlinks to recreate: path -> target)."""
    wanted = {*SYSTEM_PATHS, *_interpreter_paths()} if paths is None else set(paths)
    binds: list[str] = []
    symlinks: dict[str, str] = {}
    for path in sorted(p for p in wanted if os.path.lexists(p)):
        if any(path.startswith(kept + "/") for kept in [*binds, *symlinks]):
            continue
        if os.path.islink(path):
            symlinks[path] = os.readlink(path)
        else:
            binds.append(path)
    return binds, symlinks


def _unshare_prefixes(root: bool) -> list[tuple[str, ...]]:
    """unshare commands for the rlimit backend, most isolated first."""
    if not shutil.which("unshare"):
        return []
    namespaces = ("--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    if root:
        return [("unshare", *namespaces), ("unshare", "--net")]
    return [("unshare", "--user", "--map-root-user", *namespaces)]


_PROBE_CODE = ("import os\n"
               "print('working directory', 'writable' if os.access('.', os.W_OK) else 'read-only', end=', ')\n"
               "print('host filesystem', 'read-only' if os.statvfs('/').f_flag & os.ST_RDONLY else 'writable')")


def _probe(backend: Backend) -> str | None:
    """Start a real worker and check what the backend promises: a writable working directory, and for
    bwrap and unshare a read-only host. None when it delivers, else why not."""
    worker = _Worker(backend)
    try:
        observation = worker.run(_PROBE_CODE, START_TIMEOUT_S).observation()
    finally:
        worker.kill()
    promised = "working directory writable" + (", host filesystem read-only" if backend.private_filesystem else "")
    if observation.startswith(promised) and observation.count("\n") == 1:
        return None
    return observation.strip().splitlines()[-1].removeprefix("Error: ")


def _throwaway_uid() -> int:
    """A uid no account or file uses, so the sandbox's process count starts at zero."""
    return 2_000_000_000 + random.randrange(100_000_000)


def _child_env(workdir: str) -> dict[str, str]:
    """The only environment the code sees: nothing from the parent (API keys stay out)."""
    return {"PATH": SAFE_PATH, "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class _Capture:
    """Decode one output stream as it arrives, keeping its head (stdout) or its tail (stderr)."""

    def __init__(self, keep: str):
        self.keep = keep
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self.dropped = 0  # characters not kept

    def feed(self, data: bytes, final: bool = False) -> None:
        self.text += self.decoder.decode(data, final)
        extra = len(self.text) - MAX_OUTPUT_CHARS
        if extra > 0:
            self.dropped += extra
            self.text = self.text[:MAX_OUTPUT_CHARS] if self.keep == "head" else self.text[extra:]

    def result(self) -> str:
        self.feed(b"", final=True)
        if not self.dropped:
            return self.text
        if self.keep == "head":
            return f"{self.text}\n[... output truncated: {self.dropped} more characters]\n"
        return f"[... output truncated: {self.dropped} earlier characters]\n{self.text}"


@dataclass
class _Outcome:
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    """the last line of the observation, "Error: ..." (None for a normal run)"""
    lost: bool = False
    """the worker process is gone: a session loses its variables"""

    def observation(self) -> str:
        sections = [s for s in (self.stdout, self.stderr and "[stderr]\n" + self.stderr, self.error) if s]
        if not sections:
            return "(no output)"
        return "".join(s if s.endswith("\n") else s + "\n" for s in sections[:-1]) + sections[-1]


class _Worker:
    """One sandboxed interpreter: started in __init__, runs cells, killed by `kill`."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.uid = _throwaway_uid() if backend.separate_uid else None
        self.host_workdir = None if backend.private_filesystem else tempfile.mkdtemp(prefix="agentrl_sandbox_")
        workdir = PRIVATE_WORKDIR if backend.private_filesystem else self.host_workdir
        if self.host_workdir and self.uid is not None:
            os.chown(self.host_workdir, self.uid, self.uid)
        self.start_error: str | None = None
        self.proc: subprocess.Popen | None = None
        control_r, control_w = os.pipe()
        self.control = control_r
        config = {"control_fd": control_w, "uid": self.uid, "workdir": workdir,
                  "preload": PRELOAD if self.uid is not None and not backend.private_filesystem else [],
                  "memory_bytes": MEMORY_MB * 2**20, "max_file_bytes": MAX_FILE_BYTES,
                  "max_open_files": MAX_OPEN_FILES, "max_cpu_s": MAX_CPU_S, "max_processes": MAX_PROCESSES,
                  "stop_strays": backend.pid_namespace or self.uid is not None, "contain": backend.name == "unshare"}
        if config["contain"]:  # what the worker needs to build its private filesystem (`contain`)
            binds, symlinks = _visible_paths()
            config.update(host_mount_ns=os.stat("/proc/self/ns/mnt").st_ino, binds=binds, symlinks=symlinks,
                          workdir_bytes=WORKDIR_MB * 2**20)
        source = f"# {_WORKER_TAG}\n{_worker_source()}"
        argv = [*backend.prefix, sys.executable, "-I", "-u", "-c", source, json.dumps(config)]
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, pass_fds=(control_w,),
                                         env=_child_env(workdir), cwd=self.host_workdir or "/",
                                         start_new_session=True)
        except OSError as exc:
            self.start_error = str(exc)
        finally:
            os.close(control_w)
        if self.proc is None:
            return
        self.streams = {self.proc.stdout.fileno(): "stdout", self.proc.stderr.fileno(): "stderr",
                        self.control: "control"}
        for fd in (*self.streams, self.proc.stdin.fileno()):
            os.set_blocking(fd, False)
        ready = self._collect(time.monotonic() + START_TIMEOUT_S)
        if ready.get("ready") is not True:
            self.start_error = (ready["stderr"].result().strip().splitlines() or ["it did not answer"])[-1]

    def _collect(self, deadline: float, to_send: bytes = b"") -> dict:
        """Send `to_send` to the worker and read the pipes until it answers on the control pipe, dies,
        or the deadline passes (never blocking: a worker that stops reading cannot hang the host).

        Returns the answer (a dict; {} on death, {"timeout": True} at the deadline) with "stdout" and
        "stderr" captures added."""
        captures = {"stdout": _Capture("head"), "stderr": _Capture("tail")}
        control_buffer = b""
        answer: dict | None = None
        with selectors.DefaultSelector() as selector:
            for fd, name in self.streams.items():
                selector.register(fd, selectors.EVENT_READ, name)
            stdin = self.proc.stdin.fileno()
            if to_send:
                selector.register(stdin, selectors.EVENT_WRITE, "stdin")
            while answer is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    answer = {"timeout": True}
                    break
                for key, _ in selector.select(min(remaining, 0.1)):
                    if key.data == "stdin":
                        try:
                            to_send = to_send[os.write(stdin, to_send[:65536]):]
                        except BlockingIOError:
                            continue
                        except OSError:  # the worker is gone: the poll below notices
                            to_send = b""
                        if not to_send:
                            selector.unregister(stdin)
                        continue
                    data = self._read(key.fd)
                    if data is None:
                        continue
                    if not data:
                        selector.unregister(key.fd)
                    elif key.data == "control":
                        control_buffer += data
                    else:
                        captures[key.data].feed(data)
                if b"\n" in control_buffer:
                    answer = _parse_answer(control_buffer.split(b"\n", 1)[0])
                elif self.proc.poll() is not None:
                    answer = {}
        for name, capture in captures.items():  # what the worker wrote before answering or dying
            self._drain(getattr(self.proc, name).fileno(), capture)
        return {**answer, **captures}

    def _drain(self, fd: int, capture: _Capture | None = None) -> None:
        """Read what is buffered in a pipe (bounded: a stray process may be writing without end)."""
        for _ in range(64):
            data = self._read(fd)
            if not data:
                return
            if capture is not None:
                capture.feed(data)

    @staticmethod
    def _read(fd: int) -> bytes | None:
        try:
            return os.read(fd, 65536)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def run(self, code: str, timeout_s: float) -> _Outcome:
        if self.start_error is not None or self.proc is None or self.proc.poll() is not None:
            reason = self.start_error or "the worker is not running"
            return _Outcome(error=f"Error: the sandbox could not start: {reason}", lost=True)
        for fd in self.streams:
            self._drain(fd)  # whatever stray processes wrote between cells belongs to no cell
        payload = code.encode("utf-8", "surrogatepass")
        message = f"{len(payload)} {timeout_s}\n".encode() + payload
        answer = self._collect(time.monotonic() + timeout_s, to_send=message)
        outcome = _Outcome(stdout=answer["stdout"].result(), stderr=answer["stderr"].result())
        if answer.get("timeout"):
            self.kill()
            outcome.error, outcome.lost = f"Error: timed out after {timeout_s:.1f} s (the code was stopped)", True
        elif "status" not in answer:
            returncode = self.proc.poll()
            self.kill()
            outcome.error, outcome.lost = _describe_exit(returncode, self.backend), True
        elif answer["status"] == "exit" and answer.get("code"):
            outcome.error = f"Error: the code exited with status {answer['code']}"
        elif answer.get("type") == "MemoryError":
            outcome.error = f"Error: memory limit exceeded ({MEMORY_MB} MB)"
        elif answer.get("errno") in ERRNO_HINTS:
            outcome.error = ERRNO_HINTS[answer["errno"]]
        return outcome

    def kill(self) -> None:
        """Stop every process of the sandbox and delete its working directory. Safe to call twice."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass  # already gone
            if self.uid is not None and not self.backend.pid_namespace:
                _kill_uid(self.uid)  # children that left the process group (setsid) still have the uid
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass
            self.proc = None
        if self.control is not None:
            os.close(self.control)
            self.control = None
        if self.host_workdir is not None:
            _remove_tree(self.host_workdir)
            self.host_workdir = None


def _parse_answer(line: bytes) -> dict:
    try:
        answer = json.loads(line)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _describe_exit(returncode: int | None, backend: Backend) -> str:
    """Exit status of a worker that died (bwrap reports a signal n as exit status 128 + n)."""
    if returncode is None:
        return "Error: the sandbox stopped answering (the code was stopped)"
    if returncode < 0:
        signum = -returncode
    elif backend.name == "bwrap" and returncode > 128:
        signum = returncode - 128
    else:
        return f"Error: the code exited with status {returncode}"
    if signum == signal.SIGXCPU:
        return "Error: CPU time limit exceeded (the code was stopped)"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = str(signum)
    return f"Error: the process was killed by signal {name}"


def _kill_uid(uid: int) -> None:
    """Kill every process of a throwaway uid, repeating while any is left (it may still be forking)."""
    script = "i=0; while [ $i -lt 50 ] && kill -9 -1 2>/dev/null; do i=$((i+1)); done"
    try:
        subprocess.run(["/bin/sh", "-c", script], user=uid, group=uid, extra_groups=[], timeout=10,
                       env={"PATH": SAFE_PATH}, cwd="/")
    except (OSError, subprocess.SubprocessError):
        pass


def _remove_tree(path: str) -> None:
    """Delete a working directory even if the code made parts of it read-only."""
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            path_in_tree = os.path.join(root, name)
            if not os.path.islink(path_in_tree):  # the code is dead: the link cannot change under us
                try:
                    os.chmod(path_in_tree, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)


def run_python(code: str, timeout_s: float = TIMEOUT_S) -> str:
    """Run `code` in a fresh sandbox and return the observation the agent sees. Never raises for
    anything the code does: timeouts, limits, crashes and exceptions all come back as text. Raises
    SandboxUnavailableError, before running anything, when no backend can isolate code here."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    worker = _Worker(get_backend())
    try:
        return worker.run(code, timeout_s).observation()
    finally:
        worker.kill()


@dataclass
class CommandResult:
    """What a sandboxed command did (`run_command`)."""

    returncode: int | None
    """its exit status, minus the signal number when a signal ended it (bwrap reports signal n as 128 + n);
    None when it timed out"""
    stdout: bytes
    stderr: bytes
    """the first `max_output_bytes` of each stream"""
    timed_out: bool = False


def run_command(argv: list[str], *, readable: tuple[str, ...] = (), writable: str | None = None,
                stdin: bytes = b"", timeout_s: float = TIMEOUT_S, memory_bytes: int = MEMORY_MB * 2**20,
                max_output_bytes: int = 1 << 20) -> CommandResult:
    """Run a program (a compiler, a C harness) in this machine's sandbox backend and wait for it.

    Under bwrap and unshare the program sees SYSTEM_PATHS and `readable` read-only, `writable` (a host folder,
    the working directory) read-write, a private /tmp, a minimal /dev and a fresh /proc; not the interpreter's
    virtual environment, the checkout, data/ or home directories. It runs with no capabilities in new pid,
    network, ipc and uts namespaces: no network, and no process it starts outlives it. Limits: `memory_bytes`
    of address space and CPU seconds per process, MAX_FILE_BYTES per written file, MAX_OPEN_FILES; after
    `timeout_s` every process of the sandbox is killed. Raises SandboxUnavailableError where no backend can
    isolate code (AGENTRL_SANDBOX=rlimit runs it anyway, with the limits and the network and pid namespaces
    unshare may create, in `writable` or a fresh temporary folder)."""
    backend = get_backend()
    argv = [shutil.which(argv[0]) or argv[0], *argv[1:]]
    workdir = writable or PRIVATE_WORKDIR
    binds, symlinks = _visible_paths((*SYSTEM_PATHS, *readable))
    if backend.name == "bwrap":
        size = ("--size", str(WORKDIR_MB * 2**20)) if _bwrap_supports_size() else ()
        prefix = ["bwrap", "--perms", "1777", *size, "--tmpfs", "/tmp", "--perms", "1777", "--dir",
                  PRIVATE_WORKDIR, *_bwrap_binds(binds, symlinks, writable), "--dev", "/dev", "--proc", "/proc",
                  "--chdir", workdir, "--remount-ro", "/dev", "--remount-ro", "/",
                  "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                  "--cap-drop", "ALL", *(() if backend.separate_uid else ("--unshare-user",)),
                  "--die-with-parent", "--new-session", "--"]
    elif backend.name == "unshare":  # the worker builds the filesystem, drops every capability, then execs
        config = {"exec": argv, "contain": True, "host_mount_ns": os.stat("/proc/self/ns/mnt").st_ino,
                  "binds": binds, "symlinks": symlinks, "writable": [writable] if writable else [],
                  "workdir": PRIVATE_WORKDIR, "chdir": workdir, "workdir_bytes": WORKDIR_MB * 2**20}
        prefix = [*backend.prefix, sys.executable, "-I", "-c", f"# {_WORKER_TAG}\n{_worker_source()}",
                  json.dumps(config)]
        argv = []
    else:
        prefix = list(backend.prefix)
    scratch = None if writable or backend.private_filesystem else tempfile.mkdtemp(prefix="agentrl_sandbox_")
    limits = {"RLIMIT_AS": memory_bytes, "RLIMIT_CPU": int(timeout_s) + 1, "RLIMIT_CORE": 0,
              "RLIMIT_FSIZE": MAX_FILE_BYTES, "RLIMIT_NOFILE": MAX_OPEN_FILES}
    prlimit = shutil.which("prlimit")  # util-linux: sets the limits, then execs (no fork of this big process)
    if prlimit:
        prefix = [prlimit, *(f"--{name[7:].lower()}={value}" for name, value in limits.items()), "--", *prefix]

    def set_limits() -> None:
        for name, value in limits.items():
            resource.setrlimit(getattr(resource, name), (value, value))

    try:
        proc = subprocess.Popen([*prefix, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_child_env(workdir), cwd=writable or scratch or "/",
                                start_new_session=True, preexec_fn=None if prlimit else set_limits)
        try:
            stdout, stderr, timed_out = _exchange(proc, stdin, time.monotonic() + timeout_s, max_output_bytes)
        finally:
            if proc.poll() is None:  # timed out, or left a stray holding the pipes
                _kill_tree(proc.pid)
            else:  # its pid namespace went with it; under rlimit, strays in its process group go now
                _kill_group(proc.pid)
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                pipe.close()
    finally:
        if scratch is not None:
            _remove_tree(scratch)
    code = proc.returncode
    if backend.name == "bwrap" and code is not None and code > 128:
        code = 128 - code
    return CommandResult(None if timed_out else code, stdout, stderr, timed_out)


def _kill_tree(pid: int, wait_s: float = 5.0) -> None:
    """SIGKILL a process, its process group and every descendant (a pid namespace's first process among them,
    which takes the namespace with it), then wait until none is left running."""
    family = _descendants(pid) | {pid}
    _kill_group(pid)
    for member in family:
        try:
            os.kill(member, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(_running(member) for member in family - {pid}):
        time.sleep(0.01)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass  # already gone


def _descendants(pid: int) -> set[int]:
    """Host pids of every descendant of `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _exchange(proc: subprocess.Popen, to_send: bytes, deadline: float,
              max_bytes: int) -> tuple[bytes, bytes, bool]:
    """Write `to_send` to the process's stdin and read its stdout and stderr (the first `max_bytes` of each)
    until both close or the deadline passes; (stdout, stderr, timed out)."""
    to_send = memoryview(to_send)  # slices of a view copy nothing
    out_fd, err_fd, stdin = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
    kept = {out_fd: bytearray(), err_fd: bytearray()}
    for fd in (*kept, stdin):
        os.set_blocking(fd, False)
    with selectors.DefaultSelector() as selector:
        for fd in kept:
            selector.register(fd, selectors.EVENT_READ)
        if to_send:
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(kept[out_fd]), bytes(kept[err_fd]), True
            for key, _ in selector.select(min(remaining, 0.5)):
                if key.fd == stdin:
                    try:
                        to_send = to_send[os.write(stdin, to_send[:1 << 20]):]
                    except BlockingIOError:
                        continue
                    except OSError:  # the program stopped reading
                        to_send = memoryview(b"")
                    if not to_send:
                        selector.unregister(stdin)
                        proc.stdin.close()
                    continue
                try:
                    data = os.read(key.fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    selector.unregister(key.fd)
                    continue
                buffer = kept[key.fd]
                buffer += data[:max(0, max_bytes - len(buffer))]
    return bytes(kept[out_fd]), bytes(kept[err_fd]), False


class PythonSession:
    """A Python interpreter that keeps its variables across the turns of one episode.

    Design: one long-lived worker process inside the sandbox reads cells over a pipe and `exec`s them
    in a single namespace (like a notebook kernel). If a cell times out, hits a hard limit or kills
    the interpreter, the whole sandbox is killed and the next call starts a fresh one; that cell's
    observation says the earlier state is gone. Not thread-safe: use one session per episode.

        with PythonSession() as python:
            python.run("x = 6 * 7")
            python.run("print(x)")  # "42\\n"
    """

    def __init__(self) -> None:
        self._worker: _Worker | None = None

    def run(self, code: str, timeout_s: float = TIMEOUT_S) -> str:
        """Run one cell; returns its observation (see `run_python`)."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if self._worker is None:
            self._worker = _Worker(get_backend())
        outcome = self._worker.run(code, timeout_s)
        if outcome.lost:
            self.close()
            outcome.error += "\nThe Python session was restarted: variables from earlier calls are gone."
        return outcome.observation()

    def close(self) -> None:
        """Kill the sandbox (safe to call twice)."""
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def __enter__(self) -> PythonSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit modules may already be gone; the sandbox dies with us
            pass
