"""The compiler in a box: it reads files and runs for as long as its input asks, so it is part of the attack
surface. It runs under the limits a candidate's own code runs under, and what it prints comes back trimmed to
the candidate's own lines.

- `run_sandboxed` (gcc): in the sandbox of `agentrl_lite.sandbox` (bubblewrap or unshare): it sees the system's
  programs and libraries, the private headers and its scratch folder, not the checkout, `data/` or home
  folders; no network; every process killed when it times out;
- `run_boxed` (nvcc, whose toolkit may live anywhere): a process group of its own killed whole on timeout;
- both: memory, CPU-time and file-size limits on the compiler and every process it starts (cc1, as, ld), so an
  include of `/dev/zero` or a macro that expands without end ends the compiler, not the machine;
- the log is reduced to diagnostics located in the candidate's file, without source echo: a diagnostic in any
  other file (an include of a token file) would quote that file's content.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agentrl_lite import sandbox

MEMORY_LIMIT_BYTES = 1 << 30
"""address space of each compiler process (cc1 needs about 100 MB for a kernel)"""
OUTPUT_LIMIT_BYTES = 64 << 20
"""largest file a compiler process of `run_boxed` may write (the sandbox has its own, smaller limit)"""
LOG_LIMIT_BYTES = 64 << 10
"""the part of gcc's log that is read back"""
SOURCE_NAME = "kernel.c"
"""the candidate's file name in the scratch folder and in every diagnostic"""
DIAGNOSTIC_FLAGS = ("-fno-diagnostics-show-caret", "-fdiagnostics-color=never", "-fmax-errors=10")
"""one line per diagnostic, no source echo (it would quote any file a diagnostic points into)"""


@dataclass
class Run:
    returncode: int | None
    """None when the run was killed at its timeout"""
    log: str
    """the candidate's own diagnostics (see `own_diagnostics`)"""


def run_sandboxed(command: list[str], folder: Path, timeout_s: float, readable: tuple[str, ...] = ()) -> Run:
    """Run a compiler command in the sandbox with `folder` as its writable working folder and `readable` (the
    private headers) besides the system's programs; raises sandbox.SandboxUnavailableError where nothing can
    isolate it."""
    done = sandbox.run_command(command, readable=readable, writable=str(folder), timeout_s=timeout_s,
                               memory_bytes=MEMORY_LIMIT_BYTES, max_output_bytes=LOG_LIMIT_BYTES)
    text = (done.stdout + done.stderr).decode(errors="replace")
    return Run(done.returncode, own_diagnostics(text.replace(str(folder) + "/", "")))


def run_boxed(command: list[str], folder: Path, timeout_s: float, source_name: str = SOURCE_NAME,
              memory_bytes: int = MEMORY_LIMIT_BYTES, keep_env: tuple[str, ...] = ()) -> Run:
    """Run a compiler command in `folder` (its working and temporary folder), in a session of its own, under
    the limits above; its stdout and stderr go to a file there, of which the diagnostics in `source_name` come
    back.

    The environment is PATH and the variables named in `keep_env` only (CPATH and friends would add include
    folders)."""
    log_path = folder / "compiler.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(folder), "LC_ALL": "C",
           **{name: os.environ[name] for name in keep_env if name in os.environ}}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=lambda: _limit(timeout_s, memory_bytes))
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(process)
    with open(log_path, "rb") as log:
        text = log.read(LOG_LIMIT_BYTES).decode(errors="replace")
    return Run(returncode, own_diagnostics(text.replace(str(folder) + "/", ""), source_name))


def _limit(cpu_s: float, memory_bytes: int) -> None:
    """In the child before exec: the limits the compiler and its children inherit."""
    for name, value in (("RLIMIT_AS", memory_bytes), ("RLIMIT_CPU", int(cpu_s) + 1),
                        ("RLIMIT_FSIZE", OUTPUT_LIMIT_BYTES), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the whole session gcc leads (cc1, as, ld), whether or not the driver itself is still alive."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # every process of the group has ended
    process.wait()


def own_diagnostics(log: str, source_name: str = SOURCE_NAME, lines: int = 12, width: int = 300) -> str:
    """The diagnostics located in the candidate's file (`kernel.c:3:5: error: ...`, nvcc's `kernel.cu(3): error:
    ...`), at most `lines` lines of `width` characters.

    Everything else goes: "In file included from", diagnostics located in another file (they quote it), source
    echo, linker and driver messages."""
    kept = [line[:width] for line in log.splitlines() if line.startswith((source_name + ":", source_name + "("))]
    return "\n".join(kept[:lines]) + ("\n..." if len(kept) > lines else "")
