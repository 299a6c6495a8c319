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

- ``bwrap`` (bubblewrap, Debian package ``bubblewrap``): new pid, network, ipc and uts namespaces; the
  host filesystem read-only; /home, /root, /run and /var/tmp replaced by empty read-only tmpfs (the
  interpreter is bound back in, read-only), so home directories, sockets and keys are out of sight; the
  only writable place is /tmp (working directory /tmp/work), a WORKDIR_MB tmpfs that vanishes with the
  sandbox; killing the sandbox kills every process in it.
- ``unshare`` (util-linux, on every Linux; no root needed where user namespaces are allowed): the same
  filesystem without bubblewrap. ``unshare`` starts the worker in new mount, pid, network, ipc and uts
  namespaces (and a user namespace when not root); the worker, while it holds the capabilities of its own
  mount namespace, makes every host mount read-only (mount_setattr, Linux 5.12+), hides /home, /root,
  /run and /var/tmp the same way and mounts the /tmp tmpfs, then gives up every capability before the first
  cell. /dev and /proc are read-only (the host's /dev; a fresh /proc).
- ``rlimit`` (an explicit opt-out, warned about): the same rlimits, plus ``unshare`` for network and pid
  namespaces when it is permitted. The host filesystem is protected only by ordinary file permissions (the
  code can write wherever its uid can, /tmp included); the working directory is a fresh host temporary
  directory, deleted afterwards. Without namespaces, run as a normal user, it cannot stop the code from
  signalling the user's other processes or reaching the network.

A backend is chosen only if a real worker started with it delivers what it promises (a read-only host and
a writable working directory). Where neither bwrap nor unshare can (no user namespaces, macOS), running
code raises SandboxUnavailableError, which says how to get isolation (apt install bubblewrap); only
AGENTRL_SANDBOX=rlimit runs the code anyway.

When the parent runs as root (containers, CI images), the code runs as a fresh throwaway uid: root
ignores RLIMIT_NPROC and can read /etc/shadow, a throwaway uid cannot, and no other process shares its
process count. If that uid cannot read the interpreter's directory (an interpreter under /root), the
rlimit backend preloads common standard-library modules before dropping privileges; other imports fail.

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
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

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
HIDDEN_DIRS = ("/tmp", "/var/tmp", "/run", "/home", "/root")  # replaced by empty tmpfs under bwrap and unshare
PRELOAD = ("bisect", "collections", "ctypes", "dataclasses", "datetime", "decimal", "encodings.idna",
           "fractions", "functools", "heapq", "itertools", "json", "math", "operator", "random", "re",
           "socket", "statistics", "string", "subprocess", "textwrap", "threading", "typing")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
ERRNO_HINTS = {  # errno of an OSError raised by the code → the limit it ran into
    27: f"Error: file size limit exceeded ({MAX_FILE_BYTES // 2**20} MB)",  # EFBIG
    24: f"Error: open-file limit reached ({MAX_OPEN_FILES} files)",  # EMFILE
}

# The worker runs inside the sandbox with `python -I -u -c`: only the standard library, never this
# package. Protocol: the host writes "<n bytes> <cpu seconds>\n<code>" on stdin; the worker runs the cell
# with stdout/stderr going straight to the host's pipes and answers one JSON line on the control fd.
_WORKER_TAG = "agentrl_lite-sandbox-worker"
_WORKER_SOURCE = f"# {_WORKER_TAG}\n" + r'''
import json, linecache, os, resource, signal, sys, time, traceback


def set_limit(name, soft, hard=None):
    resource.setrlimit(getattr(resource, name), (soft, soft if hard is None else hard))


def own_processes(uid):
    try:
        return sum(1 for p in os.listdir("/proc") if p.isdigit() and os.stat("/proc/" + p).st_uid == uid)
    except OSError:
        return 0


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def run_cell(source, filename, namespace):
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        exec(compile(source, filename, "exec"), namespace)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return {"status": "exit", "code": exc.code or 0}
        write_all(2, (str(exc.code) + "\n").encode("utf-8", "replace"))
        return {"status": "exit", "code": 1}
    except BaseException as exc:
        try:
            text = format_exception(exc)
        except BaseException:
            text = f"{type(exc).__name__}: {exc}\n"
        write_all(2, text.encode("utf-8", "replace"))
        return {"status": "exception", "type": type(exc).__name__, "errno": getattr(exc, "errno", None)}
    return {"status": "ok"}


def format_exception(exc, keep=20):
    """The traceback without the worker's own frame; a deep one keeps only its last `keep` frames."""
    frames, tb = [], exc.__traceback__.tb_next
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    omitted = max(0, len(frames) - keep)
    lines = traceback.format_exception(type(exc), exc, frames[omitted] if frames else None)
    if omitted:
        header = max(i for i, line in enumerate(lines) if line.startswith("Traceback"))
        lines.insert(header + 1, f"  [... {omitted} earlier frames omitted]\n")
    return "".join(lines)


def stop_strays():
    try:
        os.kill(-1, signal.SIGKILL)  # every other process this uid may signal inside the sandbox
    except OSError:
        pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:
            return


def checked(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def make_read_only(libc, path, recursive):
    attr = (ctypes.c_uint64 * 4)(1, 0, 0, 0)  # struct mount_attr: attr_set = MOUNT_ATTR_RDONLY
    # 442 = mount_setattr (on every architecture but alpha and mips), -100 = AT_FDCWD, 0x8000 = AT_RECURSIVE
    result = libc.syscall(442, -100, path.encode(), 0x8000 if recursive else 0, ctypes.byref(attr),
                          ctypes.sizeof(attr))
    checked(result, f"cannot make {path} read-only")


def mount(libc, source, target, fstype, flags, options=None):
    checked(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       ctypes.c_ulong(flags), options and options.encode()), f"cannot mount {target}")


def contain(libc, cfg):
    """The unshare backend's filesystem, built while the worker holds its mount namespace's capabilities:
    every host mount read-only, hidden directories replaced by empty read-only tmpfs (the interpreter
    bound back), /tmp a fresh size-capped tmpfs holding the working directory."""
    if os.stat("/proc/self/ns/mnt").st_ino == cfg["host_mount_ns"]:
        raise SystemExit("refusing to remount: the worker shares the host's mount namespace")
    os.umask(0o022)
    mount(libc, None, "/", None, 16384 | 1 << 18)  # MS_REC | MS_PRIVATE: nothing propagates to the host
    bound = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in cfg["bind_back"]}  # before hiding
    make_read_only(libc, "/", recursive=True)
    for hidden in cfg["hidden_dirs"]:
        size = f",size={cfg['workdir_bytes']}" if hidden == "/tmp" else ""
        mode = "1777" if hidden == "/tmp" else "0755"
        mount(libc, "tmpfs", hidden, "tmpfs", 2 | 4, f"mode={mode}{size}")  # MS_NOSUID | MS_NODEV
        for path, fd in bound.items():
            if path.startswith(hidden + "/"):
                os.makedirs(path, 0o755, exist_ok=True)  # the throwaway uid needs x on every ancestor
                mount(libc, f"/proc/self/fd/{fd}", path, None, 4096 | 16384)  # MS_BIND | MS_REC
                make_read_only(libc, path, recursive=True)
        if hidden != "/tmp":
            make_read_only(libc, hidden, recursive=False)
    for fd in bound.values():
        os.close(fd)
    os.mkdir(cfg["workdir"])
    os.chmod(cfg["workdir"], 0o1777)


def capabilities():
    """The capability sets this process holds (0 when none)."""
    with open("/proc/self/status") as status:
        return sum(int(line.split()[1], 16) for line in status if line.startswith(("CapPrm:", "CapEff:")))


def drop_capabilities(libc, uid):
    """Leave nothing the code could use to undo `contain`: empty bounding set (no execve regains a
    capability), then a throwaway uid (root) or empty capability sets (root of a user namespace)."""
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for cap in range(int(last.read()) + 1):
            checked(libc.prctl(24, cap, 0, 0, 0), "cannot drop a capability")  # PR_CAPBSET_DROP
    if uid is None:
        header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # capset version 3
        checked(libc.capset(header, data), "cannot drop capabilities")


cfg = json.loads(sys.argv[1])
commands = os.fdopen(os.dup(0), "rb")
control = cfg["control_fd"]
os.set_inheritable(control, False)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)  # input() gets EOF instead of reading the command pipe
os.close(null)
if cfg["contain"]:  # the unshare backend: ctypes reaches mount, mount_setattr, prctl and capset
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    contain(libc, cfg)
for module in cfg["preload"]:
    try:
        __import__(module)
    except Exception:
        pass
set_limit("RLIMIT_CORE", 0)
set_limit("RLIMIT_AS", cfg["memory_bytes"])
set_limit("RLIMIT_FSIZE", cfg["max_file_bytes"])
set_limit("RLIMIT_NOFILE", cfg["max_open_files"])
set_limit("RLIMIT_CPU", cfg["max_cpu_s"])
if cfg["contain"]:
    drop_capabilities(libc, cfg["uid"])
if cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(cfg["uid"])
    os.setuid(cfg["uid"])
try:
    import ctypes
    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: execve never gains privileges (setuid, caps)
    if os.getsid(0) != os.getpid() and ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0) == 0:
        # behind unshare --fork: new credentials cleared --kill-child's parent-death signal (set again just
        # now); leave unshare's process group, so that kill(0, ...) by the code cannot reach unshare
        os.setsid()
except Exception:
    pass
if cfg["contain"] and capabilities():
    raise SystemExit("refusing to run code: the worker still holds capabilities")
uid_map = open("/proc/self/uid_map").read().split() if os.path.exists("/proc/self/uid_map") else []
fresh_count = cfg["uid"] is not None or uid_map[:3] != ["0", "0", "4294967295"]
# RLIMIT_NPROC counts every process of the uid; only a fresh uid or user namespace starts from zero
nproc = cfg["max_processes"] + (0 if fresh_count else own_processes(os.getuid()))
set_limit("RLIMIT_NPROC", nproc)
os.chdir(cfg["workdir"])
main_pid = os.getpid()
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
write_all(control, b'{"ready": true}\n')
cell = 0
while True:
    header = commands.readline()
    if not header:
        break
    size, cpu_s = header.split()
    source = commands.read(int(size)).decode("utf-8", "surrogatepass")
    cell += 1
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = min(cfg["max_cpu_s"], int(used.ru_utime + used.ru_stime + float(cpu_s)) + 1)
    set_limit("RLIMIT_CPU", soft, cfg["max_cpu_s"])
    result = run_cell(source, f"<cell {cell}>", namespace)
    if os.getpid() != main_pid:
        os._exit(0)  # a child the cell forked ran off the end of the cell: it must not answer
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    if cfg["stop_strays"]:
        stop_strays()
    write_all(control, (json.dumps(result) + "\n").encode())
'''


@dataclass(frozen=True)
class Backend:
    """How sandboxed code is started on this machine (see the module docstring)."""

    name: str
    """which isolation is used: bwrap, unshare or rlimit"""
    prefix: tuple[str, ...]
    """command placed before the interpreter (bwrap or unshare and their options; may be empty)"""
    private_filesystem: bool
    """the host filesystem is read-only and /tmp, /home, /root, /run are private"""
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
    """Host read-only, private /tmp (size-capped when bwrap supports --size), interpreter bound back."""
    size = ("--size", str(WORKDIR_MB * 2**20)) if _bwrap_supports_size() else ()
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    hidden_dirs = _hidden_dirs()
    for hidden in hidden_dirs:
        args += ["--perms", "1777", *size, "--tmpfs", hidden] if hidden == "/tmp" else ["--tmpfs", hidden]
    args += ["--perms", "1777", "--dir", PRIVATE_WORKDIR, "--chdir", PRIVATE_WORKDIR]
    created: set[str] = set()
    for path in _hidden_interpreter_dirs():
        parent = os.path.dirname(path)
        ancestors = []
        while parent not in HIDDEN_DIRS and parent not in created and parent != "/":
            ancestors.append(parent)
            parent = os.path.dirname(parent)
        for ancestor in reversed(ancestors):  # bwrap would create them 0700: the throwaway uid needs x
            args += ["--perms", "0755", "--dir", ancestor]
            created.add(ancestor)
        args += ["--ro-bind", path, path]
        created.add(path)
    for hidden in hidden_dirs:  # only /tmp stays writable: a tmpfs fills memory, so only one, capped
        if hidden != "/tmp":
            args += ["--remount-ro", hidden]
    args += ["--remount-ro", "/dev"]
    if root:  # no user namespace: the worker needs CAP_SETUID/SETGID to become a throwaway uid, then none
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-all"]
    return (*args, "--die-with-parent", "--new-session", "--")


def _bwrap_supports_size() -> bool:
    try:
        help_text = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in help_text


def _interpreter_dirs() -> list[str]:
    """Directories the interpreter needs (venv and base install), outermost first, no nesting."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))}
    paths = sorted({os.path.abspath(p) for p in candidates} | {os.path.realpath(p) for p in candidates})
    kept: list[str] = []
    for path in paths:
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return kept


def _hidden_dirs() -> list[str]:
    """The HIDDEN_DIRS that are directories here (not symlinks: those point into the others or stay visible)."""
    return [d for d in HIDDEN_DIRS if os.path.isdir(d) and not os.path.islink(d)]


def _hidden_interpreter_dirs() -> list[str]:
    """Directories the interpreter needs that a hidden directory covers: they are bound back, read-only."""
    return [path for path in _interpreter_dirs() if any(path.startswith(d + "/") for d in HIDDEN_DIRS)]


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
            config.update(host_mount_ns=os.stat("/proc/self/ns/mnt").st_ino, hidden_dirs=_hidden_dirs(),
                          bind_back=_hidden_interpreter_dirs(), workdir_bytes=WORKDIR_MB * 2**20)
        argv = [*backend.prefix, sys.executable, "-I", "-u", "-c", _WORKER_SOURCE, json.dumps(config)]
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
