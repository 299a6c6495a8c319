"""Hostile inputs for the Python sandbox: every call must come back as text, contained, leaving no trace.

Each hostile case runs on every backend, forced in turn with AGENTRL_SANDBOX (bwrap, unshare, then the rlimit
opt-out; only the one named when the run sets AGENTRL_SANDBOX). The backend is in every test id
(`test_hostile_code_is_contained[unshare-write_tmp]`), and one this machine cannot run is skipped with the
reason (`pytest -rs` lists them). After every call the same host-side checks run: the observation is a
string with the expected text, the parent's secret is not in it, no file appeared outside the sandbox (in
/, /tmp, /var/tmp, /dev/shm, $HOME or the repository), no sandbox process is left, the working directory is
gone, a bystander process is alive and a host socket received no connection. A case a backend does not
claim to contain (filesystem writes under the rlimit opt-out) is skipped, naming what is missing.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentrl_lite import sandbox
from agentrl_lite.sandbox import Backend, PythonSession, SandboxUnavailableError, run_python

REPO_ROOT = Path(__file__).resolve().parent.parent
HELDOUT = REPO_ROOT / "data" / "arithmetic_heldout.jsonl"  # gold answers the policy must never see
WORKER_FILE = REPO_ROOT / "agentrl_lite" / "sandbox_worker.py"
SECRET = f"hunter2-{uuid.uuid4().hex}"


def _sandbox_own_names(folder: Path) -> list[str]:
    """Names the sandbox itself puts in `folder`: its private working directory when the checkout lives in /tmp
    (a fresh clone under /tmp sees /tmp/work, the sandbox's own, not the host's /tmp)."""
    private = Path(sandbox.PRIVATE_WORKDIR)
    return [private.name] if folder == private.parent else []


def _names_towards_interpreter(directory: Path) -> list[str]:
    """Entries of `directory` on the way to the interpreter's own files (a virtual environment inside the
    checkout): the sandbox shows those, empty but for the interpreter."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths = {Path(os.path.abspath(p)) for p in prefixes} | {Path(os.path.realpath(p)) for p in prefixes}
    return sorted({p.relative_to(directory).parts[0] for p in paths if p.is_relative_to(directory) and p != directory})


def _owns_processes(backend: Backend) -> bool:
    """The code cannot see or signal host processes (own pid namespace or its own uid)."""
    return backend.pid_namespace or backend.separate_uid


def _isolates_filesystem(backend: Backend) -> bool:
    """The host filesystem is read-only to the code and /tmp is private (bwrap, unshare; not the opt-out)."""
    return backend.private_filesystem


@dataclass
class Case:
    id: str
    code: str
    """Python source; MARKER, HOST_PID, BYSTANDER_PID, LISTEN_PORT, HOME_DIR, REPO_ROOT, REPO_PARENT,
    TOWARDS_INTERPRETER (the names in those two that lead to the interpreter's files, a list), OUTSIDE_NAME (a
    file name) and OUTSIDE_TMP/VARTMP/SHM/HOME/REPO (that name in a host directory) are filled in"""
    expect: tuple[str, ...]
    """regular expressions that must all match the observation"""
    forbid: tuple[str, ...] = ()
    """regular expressions that must not match it"""
    timeout_s: float = 5.0
    needs: Callable[[Backend], bool] | None = None
    """what the backend must provide to contain this case (skipped otherwise)"""


TIMED_OUT = r"Error: timed out after 1\.0 s \(the code was stopped\)"
WRITE_REFUSED = r"Read-only file system|Permission denied|No such file or directory"
READ_REFUSED = r"No such file or directory|Permission denied"

CASES = [
    Case("fork_bomb", "import os\nwhile True:\n    os.fork()",
         (r"BlockingIOError: \[Errno 11\]|" + TIMED_OUT,), timeout_s=1.0),
    Case("infinite_loop", "while True:\n    pass", ("^" + TIMED_OUT + "$",), timeout_s=1.0),
    Case("sleep_past_timeout", "import time\nprint('before', flush=True)\ntime.sleep(100)",
         ("^before\n", TIMED_OUT), timeout_s=1.0),
    Case("threads_spinning",
         "import threading\ndef spin():\n    while True:\n        pass\n"
         "threads = [threading.Thread(target=spin) for _ in range(4)]\n"
         "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()",
         (TIMED_OUT + r"|Error: CPU time limit exceeded",), timeout_s=1.0),
    Case("huge_allocation", "x = bytearray(10**10)", ("MemoryError", r"Error: memory limit exceeded \(512 MB\)$")),
    Case("growing_allocation", "chunks = []\nwhile True:\n    chunks.append(bytes(10**8))",
         ("MemoryError", r"Error: memory limit exceeded \(512 MB\)$")),
    Case("recursion_bomb", "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return list(map(f, [n + 1]))\nf(0)",
         (r"Error: the process was killed by signal SIGSEGV|RecursionError",)),
    Case("python_recursion", "def f(n):\n    return f(n + 1)\nf(0)",
         (r"earlier frames omitted", r"RecursionError: maximum recursion depth exceeded\n$")),
    Case("connect_host_loopback", "import socket\nsocket.create_connection(('127.0.0.1', LISTEN_PORT), timeout=3)",
         (r"ConnectionRefusedError|Network is unreachable",), needs=lambda b: b.network_isolated),
    Case("connect_external_ip", "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)",
         (r"OSError: \[Errno 101\] Network is unreachable",), needs=lambda b: b.network_isolated),
    Case("udp_send", "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))",
         (r"Network is unreachable",), needs=lambda b: b.network_isolated),
    Case("dns_lookup", "import socket\nprint(socket.getaddrinfo('example.com', 80))",
         (r"socket\.gaierror",), needs=lambda b: b.network_isolated),
    Case("write_tmp", "open('OUTSIDE_TMP', 'w').write('escaped')\nprint('wrote inside')",
         (r"wrote inside|" + WRITE_REFUSED,), needs=lambda b: b.private_filesystem),
    Case("write_home", "open('OUTSIDE_HOME', 'w').write('escaped')", (WRITE_REFUSED,),
         needs=lambda b: b.private_filesystem or b.separate_uid),
    Case("write_repo", "open('OUTSIDE_REPO', 'w').write('escaped')", (WRITE_REFUSED,),
         needs=lambda b: b.private_filesystem or b.separate_uid),
    Case("symlink_to_repo", "import os\nos.symlink('REPO_ROOT', 'repo')\nopen('repo/OUTSIDE_NAME', 'w')",
         (WRITE_REFUSED,), needs=lambda b: b.private_filesystem or b.separate_uid),
    Case("write_workdir_ancestors",
         "for up in ('..', '../..', '../../..'):\n    try:\n        open(up + '/OUTSIDE_NAME', 'x').close()\n"
         "        print(up, 'created')\n    except OSError as exc:\n        print(up, exc.strerror)",
         (rf"^\.\. (created|{WRITE_REFUSED})\n\.\./\.\. ({WRITE_REFUSED})\n\.\./\.\./\.\. ({WRITE_REFUSED})\n$",),
         needs=_isolates_filesystem),
    Case("os_open_outside",
         "import os\nfor label, path in [('root', '/OUTSIDE_NAME'), ('repo', 'OUTSIDE_REPO'), ('home', 'OUTSIDE_HOME'),\n"
         "                    ('var_tmp', 'OUTSIDE_VARTMP'), ('shm', 'OUTSIDE_SHM')]:\n    try:\n"
         "        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))\n        print(label, 'created')\n"
         "    except OSError as exc:\n        print(label, exc.strerror)",
         (rf"^root ({WRITE_REFUSED})\nrepo ({WRITE_REFUSED})\nhome ({WRITE_REFUSED})\nvar_tmp ({WRITE_REFUSED})\n"
          rf"shm ({WRITE_REFUSED})\n$",), needs=_isolates_filesystem),
    Case("pathlib_outside",
         "from pathlib import Path\nfor label, path in [('home', Path('OUTSIDE_HOME')), ('repo', Path('OUTSIDE_REPO'))]:\n"
         "    for verb, make in [('write', lambda: path.write_text('escaped')), ('mkdir', path.mkdir), ('touch', path.touch)]:\n"
         "        try:\n            make()\n            print(label, verb, 'created')\n        except OSError as exc:\n"
         "            print(label, verb, exc.strerror)",
         tuple(rf"{label} {verb} ({WRITE_REFUSED})\n" for label in ("home", "repo") for verb in ("write", "mkdir", "touch")),
         needs=_isolates_filesystem),
    Case("subprocess_touch",
         "import subprocess\nr = subprocess.run(['touch', '/OUTSIDE_NAME', 'OUTSIDE_REPO', 'OUTSIDE_HOME', 'OUTSIDE_VARTMP',\n"
         "                    'OUTSIDE_SHM'], capture_output=True, text=True)\nprint(r.returncode)\nprint(r.stderr)",
         (rf"^1\n(touch: cannot touch '[^']*agentrl_escape_[^']*': ({WRITE_REFUSED})\n){{5}}",), needs=_isolates_filesystem),
    Case("shell_redirect",
         "import os\nos.system(\"echo escaped > 'OUTSIDE_REPO'; echo escaped > 'OUTSIDE_HOME'; mkdir 'OUTSIDE_VARTMP'\")",
         (rf"^\[stderr\]\n([^\n]*({WRITE_REFUSED})[^\n]*\n){{3}}$",), needs=_isolates_filesystem),
    Case("symlink_escapes",
         "import os\nfor label, target in [('parent', '..'), ('tmp', '/tmp'), ('root', '/'), ('home', 'HOME_DIR'),\n"
         "                      ('repo', 'REPO_ROOT'), ('shm', '/dev/shm')]:\n    os.symlink(target, 'link_' + label)\n"
         "    try:\n        open(os.path.join('link_' + label, 'OUTSIDE_NAME'), 'w').close()\n        print(label, 'created')\n"
         "    except OSError as exc:\n        print(label, exc.strerror)",
         (rf"^parent (created|{WRITE_REFUSED})\ntmp (created|{WRITE_REFUSED})\nroot ({WRITE_REFUSED})\n"
          rf"home ({WRITE_REFUSED})\nrepo ({WRITE_REFUSED})\nshm ({WRITE_REFUSED})\n$",), needs=_isolates_filesystem),
    Case("append_to_host_file", "open('REPO_ROOT/README.md', 'a').close()  # opening alone changes nothing",
         (WRITE_REFUSED,), needs=_isolates_filesystem),
    Case("remount_or_unmount",
         "import subprocess\nescape = 'mount -o remount,rw,bind /; umount -l /tmp; touch OUTSIDE_TMP OUTSIDE_REPO'\n"
         "script = f\"{escape}; unshare -rm sh -c '{escape}'; echo done\"\n"
         "r = subprocess.run(['sh', '-c', script], capture_output=True, text=True)\nprint(r.stdout + r.stderr)",
         (r"^done\n", rf"touch: cannot touch '[^']*agentrl_escape_[^']*': ({WRITE_REFUSED})"), needs=_isolates_filesystem),
    Case("read_checkout_data",
         "for label, path in [('heldout', 'REPO_ROOT/data/arithmetic_heldout.jsonl'), ('readme', 'REPO_ROOT/README.md'),\n"
         "                    ('package', 'REPO_ROOT/agentrl_lite/sandbox.py')]:\n    try:\n"
         "        print(label, open(path).readline())\n    except OSError as exc:\n        print(label, exc.strerror)",
         (rf"^heldout ({READ_REFUSED})\nreadme ({READ_REFUSED})\npackage ({READ_REFUSED})\n$",),
         needs=_isolates_filesystem),
    Case("list_checkout_and_siblings",
         "import os\nfor label, path in [('checkout', 'REPO_ROOT'), ('parent', 'REPO_PARENT'), ('data', 'REPO_ROOT/data')]:\n"
         "    try:\n        print(label, sorted(set(os.listdir(path)) - set(TOWARDS_INTERPRETER)))\n"
         "    except OSError as exc:\n        print(label, exc.strerror)",
         (rf"^checkout (\[\]|{READ_REFUSED})\nparent (\[\]|{READ_REFUSED})\ndata ({READ_REFUSED})\n$",),
         needs=_isolates_filesystem),
    Case("read_environment", "import os\nprint(sorted(os.environ))", (r"'PATH'",), forbid=(r"AGENTRL_TEST_SECRET",)),
    Case("read_parent_environ", "print(open('/proc/HOST_PID/environ').read())",
         (r"FileNotFoundError|PermissionError",), needs=_owns_processes),
    Case("kill_parent_and_bystander",
         "import os\nfor pid in (os.getppid(), HOST_PID, BYSTANDER_PID):\n    try:\n        os.kill(pid, 9)\n"
         "    except OSError as exc:\n        print(type(exc).__name__)",
         (r"(ProcessLookupError|PermissionError)\n(ProcessLookupError|PermissionError)\n$",), needs=_owns_processes),
    Case("stdout_flood", "for _ in range(10**5):\n    print('y' * 100)",
         (r"^y{100}\n", r"\n\[\.\.\. output truncated: 10096000 more characters\]\n$")),
    Case("stderr_flood", "import sys\nsys.stderr.write('e' * 10**6 + 'END')",
         (r"^\[stderr\]\n\[\.\.\. output truncated: 996003 earlier characters\]\ne+END$",)),
    Case("output_without_newline", "import sys\nwhile True:\n    sys.stdout.write('z')",
         (r"^z{4000}\n\[\.\.\. output truncated: \d+ more characters\]\n", TIMED_OUT), timeout_s=1.0),
    Case("segfault", "import ctypes\nctypes.string_at(0)", (r"^Error: the process was killed by signal SIGSEGV$",)),
    Case("os_exit", "import os\nprint('bye', flush=True)\nos._exit(3)", (r"^bye\nError: the code exited with status 3$",)),
    Case("sys_exit", "import sys\nprint('bye')\nsys.exit(4)", (r"^bye\nError: the code exited with status 4$",)),
    Case("keyboard_interrupt", "raise KeyboardInterrupt", (r"\nKeyboardInterrupt\n$",)),
    Case("background_process_outlives_parent",
         "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 100; : MARKER'], start_new_session=True)\nprint('started')",
         (r"^started\n$",), needs=_owns_processes),
    Case("shell_background_sleep", "import os\nos.system('(sleep 100; : MARKER) & echo started')", (r"^started\n$",)),
    Case("double_fork_daemon",
         "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
         "        os.execvp('sh', ['sh', '-c', 'sleep 100; : MARKER'])\n    os._exit(0)\nos.wait()\nprint('detached')",
         (r"^detached\n$",), needs=_owns_processes),
    Case("big_file", "open('big.bin', 'wb').write(b'0' * 3 * 2**20)",
         (r"File too large", r"Error: file size limit exceeded \(2 MB\)$")),
    Case("many_open_files", "files = [open('/dev/null') for _ in range(10_000)]",
         (r"Too many open files", r"Error: open-file limit reached \(64 files\)$")),
    Case("raise_own_limits", "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))",
         (r"ValueError: not allowed to raise maximum limit",)),
    Case("read_etc_shadow", "print(open('/etc/shadow').read())", (r"PermissionError|FileNotFoundError",),
         forbid=(r"root:[^\n]*:\d+:",)),
    Case("input_without_stdin", "name = input('name? ')", (r"EOFError: EOF when reading a line",)),
    Case("unreadable_workdir", "import os\nos.makedirs('a/b')\nos.chmod('a', 0)\nprint('locked')", (r"^locked\n$",)),
]


@pytest.fixture(params=sandbox.BACKENDS)
def backend(request, monkeypatch) -> Backend:
    """The backend under test, forced with AGENTRL_SANDBOX: each in turn, or only the one the run's
    AGENTRL_SANDBOX names. One that cannot run here is skipped, saying why."""
    wanted = os.environ.get("AGENTRL_SANDBOX", "auto")
    if wanted not in ("auto", request.param):
        pytest.skip(f"AGENTRL_SANDBOX={wanted}: this run tests only the {wanted} backend")
    monkeypatch.setenv("AGENTRL_SANDBOX", request.param)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the rlimit opt-out's warning has a test of its own
        try:
            return sandbox.get_backend()
        except SandboxUnavailableError as exc:
            pytest.skip(f"the {request.param} backend cannot run here: {exc}")


@pytest.fixture
def fresh_selection():
    """The backend is chosen anew in this test, and again after it (a simulated machine must not stick)."""
    sandbox._select_backend.cache_clear()
    yield
    sandbox._select_backend.cache_clear()


@pytest.fixture(autouse=True)
def parent_secret(monkeypatch):
    """A secret in the parent's environment that must never reach the sandboxed code."""
    monkeypatch.setenv("AGENTRL_TEST_SECRET", SECRET)


@pytest.fixture(autouse=True)
def worker_tag(monkeypatch) -> str:
    """A tag unique to this test in every worker's command line, to find leftovers (other test runs on
    the machine may have sandboxes of their own)."""
    tag = f"agentrl-test-worker-{uuid.uuid4().hex}"
    monkeypatch.setattr(sandbox, "_WORKER_TAG", tag)
    return tag


@pytest.fixture(scope="module")
def bystander():
    """A host process the code must not be able to kill."""
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


@pytest.fixture(scope="module")
def listener():
    """A host TCP server the code must not reach (network isolation)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def _processes_containing(text: str) -> list[int]:
    """Host pids whose command line contains `text` (a marker, or the sandbox worker's tag)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _wait_until_gone(text: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _processes_containing(text)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _sandbox_workdirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("agentrl_sandbox_*")}


def _shadow_first_line() -> str | None:
    try:
        return Path("/etc/shadow").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_code_is_contained(case: Case, backend: Backend, bystander, listener, worker_tag):
    if case.needs is not None and not case.needs(backend):
        pytest.skip(f"the {backend.name} backend here ({' '.join(backend.prefix[:1]) or 'no namespaces'}, "
                    f"uid {'separate' if backend.separate_uid else 'shared'}) cannot contain {case.id}")
    marker = f"agentrl-test-{uuid.uuid4().hex}"
    name = f"agentrl_escape_{marker}"
    host_dirs = {"TMP": Path(tempfile.gettempdir()), "VARTMP": Path("/var/tmp"), "SHM": Path("/dev/shm"),
                 "HOME": Path.home(), "REPO": REPO_ROOT}
    outside = {d / name for d in [*host_dirs.values(), Path("/"), Path("/tmp")] if d.is_dir()}
    code = case.code
    for token, value in [("MARKER", marker), ("HOST_PID", str(os.getpid())), ("BYSTANDER_PID", str(bystander.pid)),
                         ("LISTEN_PORT", str(listener.getsockname()[1])), ("HOME_DIR", str(Path.home())),
                         ("REPO_ROOT", str(REPO_ROOT)), ("REPO_PARENT", str(REPO_ROOT.parent)),
                         ("TOWARDS_INTERPRETER", repr(_names_towards_interpreter(REPO_ROOT)
                                                      + _names_towards_interpreter(REPO_ROOT.parent)
                                                      + _sandbox_own_names(REPO_ROOT.parent))),
                         ("OUTSIDE_NAME", name),
                         *[(f"OUTSIDE_{key}", str(d / name)) for key, d in host_dirs.items()]]:
        code = code.replace(token, value)
    workdirs_before = _sandbox_workdirs()

    start = time.monotonic()
    observation = run_python(code, timeout_s=case.timeout_s)
    elapsed = time.monotonic() - start

    escaped = sorted(p for p in outside if p.exists() or p.is_symlink())
    for path in escaped:  # removed before any assertion, so a failing test leaves nothing on the host
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    assert not escaped, f"the code wrote outside its sandbox: {escaped}\n{observation[-1500:]}"
    assert isinstance(observation, str)
    for pattern in case.expect:
        assert re.search(pattern, observation), f"{pattern!r} not in observation:\n{observation[-1500:]}"
    for pattern in case.forbid:
        assert not re.search(pattern, observation), f"{pattern!r} in observation:\n{observation[-1500:]}"
    assert SECRET not in observation
    shadow = _shadow_first_line()
    assert shadow is None or shadow not in observation
    assert elapsed < case.timeout_s + 5.0, "the call overran its timeout by more than the kill/cleanup margin"
    assert not _wait_until_gone(marker), "a process started by the code survived the call"
    assert not _wait_until_gone(worker_tag), "a sandbox worker survived the call"
    assert _sandbox_workdirs() == workdirs_before, "the working directory was not deleted"
    assert bystander.poll() is None, "the code killed a host process"
    with pytest.raises(BlockingIOError):
        listener.accept()[0].close()  # a connection here would mean the code reached the host network


def test_arithmetic_prints_exactly(backend):
    assert run_python("print(17 * 23)") == "391\n"


def test_no_output_is_reported(backend):
    assert run_python("x = 1") == "(no output)"


def test_unicode_round_trips(backend):
    text = "héllo wörld ✓ 你好 🎉"
    assert run_python(f"print({text!r})") == text + "\n"


def test_stdout_then_labelled_stderr(backend):
    code = "import sys\nprint('out')\nprint('err', file=sys.stderr)"
    assert run_python(code) == "out\n[stderr]\nerr\n"


def test_traceback_shows_only_the_cell(backend):
    observation = run_python("x = 1\ny = x / 0")
    assert observation.endswith("ZeroDivisionError: division by zero\n")
    assert 'File "<cell 1>", line 2, in <module>\n    y = x / 0' in observation
    assert "<string>" not in observation  # no frame of the worker itself


def test_syntax_error_is_an_observation(backend):
    observation = run_python("def f(:\n    pass")
    assert "SyntaxError" in observation and '"<cell 1>", line 1' in observation


def test_import_this_succeeds(backend):
    if backend.name == "rlimit" and backend.separate_uid:
        pytest.skip("rlimit backend as root: the throwaway uid may only import preloaded modules")
    assert run_python("import this").startswith("The Zen of Python, by Tim Peters\n")


def test_session_keeps_variables_and_sessions_are_isolated(backend):
    with PythonSession() as first, PythonSession() as second:
        assert first.run("x = 6 * 7") == "(no output)"
        assert second.run("x = 'other'") == "(no output)"
        assert first.run("x += 1\nprint(x)") == "43\n"
        assert second.run("print(x)") == "other\n"
        assert "NameError: name 'y' is not defined" in second.run("print(y)")


def test_session_survives_a_timeout_with_fresh_state(backend, worker_tag):
    with PythonSession() as python:
        python.run("x = 1")
        observation = python.run("while True:\n    pass", timeout_s=1.0)
        assert observation.startswith("Error: timed out after 1.0 s (the code was stopped)\n")
        assert "variables from earlier calls are gone" in observation
        assert "NameError: name 'x' is not defined" in python.run("print(x)")
        assert python.run("x = 2\nprint(x * 21)") == "42\n"
    assert not _wait_until_gone(worker_tag)


def test_session_restarts_after_the_interpreter_dies(backend):
    with PythonSession() as python:
        python.run("x = 1")
        observation = python.run("import os\nos._exit(5)")
        assert observation.startswith("Error: the code exited with status 5\n")
        assert "restarted" in observation
        assert python.run("print('alive')") == "alive\n"


def test_session_stops_processes_when_the_cell_ends(backend):
    if not _owns_processes(backend):
        pytest.skip("without a pid namespace or a separate uid, leftover processes cannot be found safely")
    marker = f"agentrl-test-{uuid.uuid4().hex}"
    with PythonSession() as python:
        code = f"import subprocess\np = subprocess.Popen(['sh', '-c', 'sleep 100; : {marker}'])\nprint('ok')"
        assert python.run(code) == "ok\n"
        assert not _wait_until_gone(marker), "the cell's background process outlived the cell"
        assert python.run("print(p.poll() is not None)") == "True\n"  # the session itself lives on


def test_closed_session_leaves_no_process(backend, worker_tag):
    python = PythonSession()
    assert python.run("print(1)") == "1\n"
    assert _processes_containing(worker_tag), "the leftover detector must see a live worker"
    python.close()
    python.close()
    assert not _wait_until_gone(worker_tag)


def test_large_code_arrives_whole(backend):
    assert run_python("print(len('" + "a" * 300_000 + "'))") == "300000\n"


def test_a_forged_answer_cannot_hang_the_host(backend):
    """The code answers for the worker on its control pipe and keeps running: the next cell, too big
    for the pipe buffer, must time out rather than block the host on a write."""
    forge = ("import json, os, sys, time\nfd = json.loads(sys.argv[1])['control_fd']\n"
             "os.write(fd, b'{\"status\": \"ok\"}\\n')\ntime.sleep(100)")
    with PythonSession() as python:
        assert python.run(forge, timeout_s=2.0) == "(no output)"
        start = time.monotonic()
        observation = python.run("x = '" + "b" * 300_000 + "'", timeout_s=1.0)
        assert time.monotonic() - start < 5.0
        assert observation.startswith("Error: timed out after 1.0 s")
        assert python.run("print('after')") == "after\n"


@pytest.mark.parametrize("failing, chosen", [((), "bwrap"), (("bwrap",), "unshare"), (("bwrap", "unshare"), None)])
def test_auto_tries_bwrap_then_unshare_and_never_the_rlimit_opt_out(failing, chosen, monkeypatch, fresh_selection):
    monkeypatch.delenv("AGENTRL_SANDBOX", raising=False)
    monkeypatch.setattr(sandbox.shutil, "which", lambda cmd: f"/usr/bin/{cmd}")
    probed = []

    def probe(backend: Backend) -> str | None:
        probed.append(backend.name)
        return f"simulated: {backend.name} fails" if backend.name in failing else None

    monkeypatch.setattr(sandbox, "_probe", probe)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # choosing a contained backend is silent
        if chosen is None:
            with pytest.raises(SandboxUnavailableError, match=r"\(simulated: bwrap fails\); unshare cannot"):
                sandbox.get_backend()
        else:
            assert sandbox.get_backend().name == chosen
    assert probed == ["bwrap", "unshare"][:len(failing) + 1]


def test_missing_bwrap_selects_unshare(monkeypatch, fresh_selection):
    monkeypatch.delenv("AGENTRL_SANDBOX", raising=False)
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda cmd: None if cmd == "bwrap" else real_which(cmd))
    try:
        backend = sandbox.get_backend()
    except SandboxUnavailableError as exc:
        pytest.skip(f"unshare cannot contain code here either: {exc}")
    assert backend.name == "unshare" and backend.private_filesystem
    assert run_python("import os\nprint(os.getcwd())") == f"{sandbox.PRIVATE_WORKDIR}\n"


def _no_containment(monkeypatch) -> None:
    """Simulate a machine where no backend can contain code (no user namespaces, macOS): every probe fails."""
    monkeypatch.setattr(sandbox, "_probe", lambda backend: "simulated: no user namespaces")


def test_without_containment_python_refuses_with_an_actionable_error(monkeypatch, fresh_selection):
    monkeypatch.delenv("AGENTRL_SANDBOX", raising=False)
    _no_containment(monkeypatch)
    code = "print('ran ' + 'unsandboxed')"
    with pytest.raises(SandboxUnavailableError, match=r"Install bubblewrap \(apt install bubblewrap\)") as refused:
        run_python(code)
    assert "simulated: no user namespaces" in str(refused.value)  # why, for each backend tried
    assert "AGENTRL_SANDBOX=rlimit" in str(refused.value)  # and the documented opt-out
    with PythonSession() as session, pytest.raises(SandboxUnavailableError):
        session.run(code)
    from agentrl_lite.chat import ToolCall
    from agentrl_lite.tools import Toolbox, python  # imports transformers: only this test needs it

    observation = Toolbox([python]).execute(ToolCall("python", {"code": code}))  # in a rollout: an observation
    assert observation.startswith("Error: python raised SandboxUnavailableError: ")
    assert "apt install bubblewrap" in observation and "ran unsandboxed" not in observation


def test_the_rlimit_opt_out_runs_the_code_and_warns_once(monkeypatch, fresh_selection):
    monkeypatch.setenv("AGENTRL_SANDBOX", "rlimit")
    _no_containment(monkeypatch)
    with pytest.warns(RuntimeWarning, match=r"without filesystem isolation.*apt install bubblewrap"):
        assert run_python("print('opted out')") == "opted out\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call must not warn again
        assert run_python("print('again')") == "again\n"
    assert not sandbox.get_backend().private_filesystem


@pytest.mark.parametrize("name", ["bwrap", "unshare"])
def test_forcing_a_missing_backend_is_an_actionable_error(name, monkeypatch, fresh_selection):
    monkeypatch.setenv("AGENTRL_SANDBOX", name)
    monkeypatch.setattr(sandbox.shutil, "which", lambda cmd: None)
    with pytest.raises(SandboxUnavailableError, match=rf"^AGENTRL_SANDBOX={name}: .*\({name} not found\).*"
                                                      r"apt install bubblewrap"):
        sandbox.get_backend()


def test_the_worker_never_remounts_the_hosts_mount_namespace():
    """The unshare worker makes mounts read-only only in a mount namespace of its own: started without one
    (here in a user namespace alone, where remounting would fail anyway) it refuses and runs nothing."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "--user", "--map-root-user", "true"],
                                                     capture_output=True).returncode != 0:
        pytest.skip("unshare cannot create a user namespace here")
    no_mount_namespace = Backend("unshare", ("unshare", "--user", "--map-root-user", "--"), private_filesystem=True,
                                 network_isolated=False, pid_namespace=False, separate_uid=False)
    assert sandbox._probe(no_mount_namespace) == ("the sandbox could not start: refusing to remount: "
                                                  "the worker shares the host's mount namespace")


def test_unknown_backend_name_is_rejected(monkeypatch):
    monkeypatch.setenv("AGENTRL_SANDBOX", "docker")
    with pytest.raises(ValueError, match="AGENTRL_SANDBOX='docker'"):
        sandbox.get_backend()


def test_non_positive_timeout_is_rejected():
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        run_python("print(1)", timeout_s=0)


def test_the_worker_imports_only_the_standard_library():
    tree = ast.parse(WORKER_FILE.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names
    assert run_python("import sys\nprint(sorted(m for m in sys.modules if m.startswith('agentrl')))") == "[]\n"


def test_the_sandbox_runs_the_worker_module_file(backend, worker_tag):
    """The worker is a real module (ruff, coverage and editors see it), not code in a string: the program
    the sandboxed interpreter was given with -c is that file's text under the tag line, byte for byte."""
    with PythonSession() as python:
        assert python.run("print('up')") == "up\n"
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    for pid in _processes_containing(worker_tag)]
    assert commands, "the worker's process must be found by its tag"
    expected = f"# {worker_tag}\n{WORKER_FILE.read_text()}".encode()
    assert all(argv[argv.index(b"-c") + 1] == expected for argv in commands)
    assert not any(isinstance(value, str) and "def run_cell" in value for value in vars(sandbox).values())


def test_a_checkout_outside_home_and_tmp_is_hidden(backend):
    """A copy of the package and of a data file in a folder outside $HOME and /tmp (/srv, else /var/lib):
    a sandbox started from that copy can neither read the data file nor list the folder."""
    if not _isolates_filesystem(backend):
        pytest.skip(f"the {backend.name} backend does not claim to hide the host's files")
    parent = next((Path(d) for d in ("/srv", "/var/lib") if os.access(d, os.W_OK)), None)
    if parent is None:
        pytest.skip("neither /srv nor /var/lib is writable here")
    checkout = parent / f"agentrl-test-{uuid.uuid4().hex}"
    try:
        shutil.copytree(REPO_ROOT / "agentrl_lite", checkout / "agentrl_lite",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (checkout / "data").mkdir()
        shutil.copy(HELDOUT, checkout / "data" / HELDOUT.name)
        code = ("import os\nfor label, read in [('heldout', lambda: open('CHECKOUT/data/HELDOUT').readline()),\n"
                "                    ('checkout', lambda: os.listdir('CHECKOUT'))]:\n    try:\n"
                "        print(label, read())\n    except OSError as exc:\n        print(label, exc.strerror)")
        code = code.replace("CHECKOUT", str(checkout)).replace("HELDOUT", HELDOUT.name)
        script = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom agentrl_lite import sandbox\n"
                  "assert sandbox.__file__.startswith(sys.argv[1]), sandbox.__file__\n"
                  "print(sandbox.run_python(sys.argv[2]), end='')")
        result = subprocess.run([sys.executable, "-c", script, str(checkout), code], capture_output=True,
                                text=True, timeout=120, cwd="/", env={**os.environ, "AGENTRL_SANDBOX": backend.name})
    finally:
        shutil.rmtree(checkout, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout == "heldout No such file or directory\ncheckout No such file or directory\n"
