"""The sandbox's worker: the program inside the sandbox that runs model-written cells and reports each one.

`agentrl_lite.sandbox` starts it as `python -I -u -c <this file's text> <config JSON>`, so it uses only the
standard library: the sandbox shows no file of this package. It builds the unshare backend's filesystem
(`contain`), sets the limits, drops privileges, then serves cells. Protocol: the host writes
"<n bytes> <cpu seconds>\\n<code>" on stdin; the worker runs the cell with stdout and stderr going straight to
the host's pipes and answers one JSON line on the control fd: {"ready": true} once started, then per cell
{"status": "ok"}, {"status": "exit", "code": n} or {"status": "exception", "type": ..., "errno": ...}.

With "exec" in its config it runs a program instead of cells (`sandbox.run_command` under unshare): it builds
the filesystem, gives up every capability and replaces itself with the program.

Importing this module does nothing; only running it as a program starts the worker.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import linecache
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18  # mount(2) flags
MNT_DETACH = 2  # umount2(2): detach now, free when no longer busy
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")  # the host devices a minimal /dev shows
DEVICE_LINKS = {"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1",
                "/dev/stderr": "/proc/self/fd/2"}


def set_limit(name: str, soft: int, hard: int | None = None) -> None:
    resource.setrlimit(getattr(resource, name), (soft, soft if hard is None else hard))


def own_processes(uid: int) -> int:
    """How many processes of `uid` exist (0 when /proc cannot tell)."""
    try:
        return sum(1 for p in os.listdir("/proc") if p.isdigit() and os.stat("/proc/" + p).st_uid == uid)
    except OSError:
        return 0


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def run_cell(source: str, filename: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute one cell in `namespace`; its answer for the host (the text of an error goes to stderr)."""
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


def format_exception(exc: BaseException, keep: int = 20) -> str:
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


def stop_strays() -> None:
    """Kill every other process this uid may signal inside the sandbox and reap them (for up to a second)."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:  # there was none
        pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:
            return


def checked(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def make_read_only(libc: ctypes.CDLL, path: str, recursive: bool) -> None:
    attr = (ctypes.c_uint64 * 4)(1, 0, 0, 0)  # struct mount_attr: attr_set = MOUNT_ATTR_RDONLY
    # 442 = mount_setattr (on every architecture but alpha and mips), -100 = AT_FDCWD, 0x8000 = AT_RECURSIVE
    result = libc.syscall(442, -100, path.encode(), 0x8000 if recursive else 0, ctypes.byref(attr),
                          ctypes.sizeof(attr))
    checked(result, f"cannot make {path} read-only")


def mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int,
          options: str | None = None) -> None:
    checked(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       ctypes.c_ulong(flags), options and options.encode()), f"cannot mount {target}")


def contain(libc: ctypes.CDLL, cfg: dict[str, Any]) -> None:
    """The unshare backend's filesystem, built while the worker holds its mount namespace's capabilities:
    a new root holding only a size-capped /tmp with the working directory, `cfg["binds"]` (read-only, at
    their host paths), `cfg["symlinks"]`, a minimal read-only /dev and /proc; the host's root is then
    detached, so nothing else of the host can be reached by any path."""
    if os.stat("/proc/self/ns/mnt").st_ino == cfg["host_mount_ns"]:
        raise SystemExit("refusing to remount: the worker shares the host's mount namespace")
    os.umask(0o022)  # directories on the way to a bound path: the throwaway uid needs x on each
    mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates to the host
    devices = [f"/dev/{name}" for name in DEVICES if os.path.exists(f"/dev/{name}")]
    # opened before the new root covers /tmp, in case a bound path lies under it
    writable = cfg.get("writable", [])
    sources = {path: os.open(path, os.O_PATH) for path in [*cfg["binds"], *writable, *devices, "/proc"]}
    new_root = "/tmp"
    mount(libc, "tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for directory, mode, size in [("/tmp", "1777", f",size={cfg['workdir_bytes']}"), ("/dev", "0755", "")]:
        os.mkdir(new_root + directory)
        mount(libc, "tmpfs", new_root + directory, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}{size}")
    os.mkdir(new_root + cfg["workdir"])
    os.chmod(new_root + cfg["workdir"], 0o1777)
    os.mkdir(new_root + "/dev/shm")
    for path, target in {**cfg["symlinks"], **DEVICE_LINKS}.items():
        os.makedirs(os.path.dirname(new_root + path), exist_ok=True)
        os.symlink(target, new_root + path)
    for path, fd in sources.items():
        inside = new_root + path
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.mkdir(inside)
        else:
            os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        mount(libc, f"/proc/self/fd/{fd}", inside, None, MS_BIND | MS_REC)
        if path not in writable:
            make_read_only(libc, inside, recursive=True)
        os.close(fd)
    make_read_only(libc, new_root + "/dev", recursive=False)
    make_read_only(libc, new_root, recursive=False)
    os.chdir(new_root)
    checked(libc.pivot_root(b".", b"."), "cannot switch to the sandbox's root")  # the host's root now on top
    checked(libc.umount2(b".", MNT_DETACH), "cannot detach the host's root")
    os.chdir("/")


def capabilities() -> int:
    """The capability sets this process holds (0 when none)."""
    with open("/proc/self/status") as status:
        return sum(int(line.split()[1], 16) for line in status if line.startswith(("CapPrm:", "CapEff:")))


def drop_capabilities(libc: ctypes.CDLL, uid: int | None) -> None:
    """Leave nothing the code could use to undo `contain`: empty bounding set (no execve regains a
    capability), then a throwaway uid (root) or empty capability sets (root of a user namespace)."""
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for cap in range(int(last.read()) + 1):
            checked(libc.prctl(24, cap, 0, 0, 0), "cannot drop a capability")  # PR_CAPBSET_DROP
    if uid is None:
        header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # capset version 3
        checked(libc.capset(header, data), "cannot drop capabilities")


def forbid_new_privileges(libc: ctypes.CDLL) -> None:
    """No execve gains privileges (setuid programs, file capabilities); and behind `unshare --fork`, leave
    unshare's process group so that kill(0, ...) by the code cannot reach unshare."""
    if not hasattr(libc, "prctl"):  # not Linux: the rlimit opt-out on macOS
        return
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    if os.getsid(0) != os.getpid() and libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0:
        # new credentials cleared --kill-child's parent-death signal (PR_SET_PDEATHSIG, set again just now)
        os.setsid()


def serve(cfg: dict[str, Any], commands: Any, control: int) -> None:
    """Run cells as the host sends them until it closes stdin, answering each on the control fd."""
    main_pid = os.getpid()
    namespace = {"__name__": "__main__", "__builtins__": builtins}
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


def run_program(cfg: dict[str, Any]) -> None:
    """`sandbox.run_command` under unshare: build the filesystem, give up every capability, run the program."""
    libc = ctypes.CDLL(None, use_errno=True)
    contain(libc, cfg)
    drop_capabilities(libc, None)
    forbid_new_privileges(libc)
    if capabilities():
        raise SystemExit("refusing to run the program: the sandbox still holds capabilities")
    os.chdir(cfg["chdir"])
    os.execv(cfg["exec"][0], cfg["exec"])


def main(cfg: dict[str, Any]) -> None:
    """Start the worker: filesystem (unshare backend), limits, privileges, then serve cells."""
    commands = os.fdopen(os.dup(0), "rb")
    control = cfg["control_fd"]
    os.set_inheritable(control, False)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # input() gets EOF instead of reading the command pipe
    os.close(null)
    libc = ctypes.CDLL(None, use_errno=True)
    if cfg["contain"]:
        contain(libc, cfg)
    for module in cfg["preload"]:
        try:
            __import__(module)
        except (ImportError, OSError):  # a module this interpreter lacks: the code's import fails later
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
    forbid_new_privileges(libc)
    if cfg["contain"] and capabilities():
        raise SystemExit("refusing to run code: the worker still holds capabilities")
    uid_map = Path("/proc/self/uid_map").read_text().split() if os.path.exists("/proc/self/uid_map") else []
    fresh_count = cfg["uid"] is not None or uid_map[:3] != ["0", "0", "4294967295"]
    # RLIMIT_NPROC counts every process of the uid; only a fresh uid or user namespace starts from zero
    set_limit("RLIMIT_NPROC", cfg["max_processes"] + (0 if fresh_count else own_processes(os.getuid())))
    os.chdir(cfg["workdir"])
    serve(cfg, commands, control)


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    if "exec" in config:
        run_program(config)
    else:
        main(config)
