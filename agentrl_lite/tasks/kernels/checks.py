"""Checks on what the compiler sees and on what it built, shared by the cpu_c and cuda backends.

Source: the preprocessor is a language of its own in which a forbidden word can be assembled from harmless
pieces (token pasting, a backslash-newline splice, a digraph or trigraph, `_Pragma`), so
- `lexical_problems` refuses those constructions outright in a candidate's text (a kernel has no need for
  them), along with every directive but the few a kernel uses;
- `token_problems` reads the *preprocessed* token stream, where a forbidden word appears however it was
  spelt in the text.

Binary: `elf_sections`, `undefined_symbols`, `instruction_counts` and `got_relocations` read an object or
library with binutils, for link checks that compare a candidate's library with an empty kernel's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable

ALLOWED_DIRECTIVES = ("include", "define", "undef", "if", "ifdef", "ifndef", "elif", "else", "endif", "pragma")
"""preprocessor directives a candidate may use (no #line: it would make another file's lines look like its own)"""
MAX_UNROLL = 64
"""the largest `#pragma GCC unroll` factor (a huge one keeps the compiler busy past its timeout)"""
ALLOWED_BUILTINS = {
    "expect", "expect_with_probability", "assume_aligned", "prefetch", "unreachable", "trap", "constant_p",
    "offsetof", "types_compatible_p", "choose_expr", "isnan", "isinf", "isfinite", "isnormal", "signbit",
    "fpclassify", "isgreater", "isgreaterequal", "isless", "islessequal", "islessgreater", "isunordered",
    "huge_val", "huge_valf", "inf", "inff", "nan", "nanf", "copysign", "copysignf", "clz", "clzl", "clzll",
    "ctz", "ctzl", "ctzll", "popcount", "popcountl", "popcountll", "bswap16", "bswap32", "bswap64",
    "add_overflow", "sub_overflow", "mul_overflow", "shuffle", "convertvector",
}
"""`__builtin_` functions a kernel may call besides the forms of its allowed imports: hints, classification,
bit tricks; none reaches the OS, the clock (rdtsc), the stack frames or the CPU's identity"""
FORBIDDEN_INSTRUCTIONS = {
    # x86: system calls, the time-stamp and performance counters, the CPU's identity, segment bases, TSX
    "syscall", "sysenter", "int", "into", "rdtsc", "rdtscp", "rdpmc", "cpuid", "xgetbv", "rdpid", "rdrand",
    "rdseed", "rdfsbase", "rdgsbase", "wrfsbase", "wrgsbase", "xbegin", "tpause", "umwait", "umonitor",
    # arm64: supervisor and hypervisor calls, system registers (the virtual counter is one)
    "svc", "hvc", "smc", "mrs", "msr",
}
"""instructions no compute kernel needs (`int3` and `ud2`, what `__builtin_trap` emits, only stop the process)"""

_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
_SPLICE = re.compile(r"\\[ \t\f\v]*\r?\n")
_DIGRAPH = re.compile(r"<:|:>|<%|%>|%:")
_COMMENT_OR_LITERAL = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_TOKEN = re.compile(r"[A-Za-z_]\w*|\.?\d(?:[eEpP][+-]|[\w.])*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|"
                    r"\[\[|\S")


def lexical_problems(source: str, allowed_headers: tuple[str, ...] | None, pragma_ok: Callable[[str], bool],
                     pragmas: str) -> list[str]:
    """What is wrong with the candidate's text as the preprocessor would read it; empty when nothing is.

    allowed_headers: the <headers> it may include (None: any <header>, the backend judges them);
    pragma_ok: whether the words after `#pragma` are a pragma the backend allows, which `pragmas` names."""
    problems = []
    if _SPLICE.search(source):
        problems.append("splices lines with a backslash at a line's end (write each line whole)")
    if _TRIGRAPH.search(source):
        problems.append("uses a trigraph (??= ??/ ...), a way to spell other characters")
    code = _COMMENT_OR_LITERAL.sub(lambda m: m.group()[0] * 2 if m.group()[0] in "\"'" else " ", source)
    if _DIGRAPH.search(code):
        problems.append("uses a digraph (<: :> <% %> %:), a way to spell other characters")
    if re.search(r"\b_Pragma\b", code):
        problems.append("uses _Pragma (use #pragma on a line of its own)")
    if re.search(r"\b__has_include(_next)?\b", code):
        problems.append("asks whether a file exists (__has_include)")
    for line in code.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            problems += _directive_problems(stripped[1:].strip(), allowed_headers, pragma_ok, pragmas)
        if "#" in (stripped[1:] if stripped.startswith("#") else stripped):
            problems.append("uses # or ## in a macro (stringizing or token pasting can spell a forbidden name)")
    return list(dict.fromkeys(problems))


def _directive_problems(directive: str, allowed_headers: tuple[str, ...] | None, pragma_ok: Callable[[str], bool],
                        pragmas: str) -> list[str]:
    name = re.match(r"\w*", directive).group()
    rest = directive[len(name):].strip()
    if name == "":
        return [] if rest == "" else ["uses a line marker (# <number>), which claims lines of another file"]
    if name not in ALLOWED_DIRECTIVES:
        return [f"uses #{name}; allowed directives: #{', #'.join(ALLOWED_DIRECTIVES)}"]
    if name == "include":
        header = re.fullmatch(r"<([^<>]+)>", rest)
        if header is None:
            return ["includes a local header, a path or a macro; only the allowed <headers>"]
        if allowed_headers is not None and header.group(1).strip() not in allowed_headers:
            return [f"includes <{header.group(1).strip()}>; allowed: {', '.join(allowed_headers)}"]
    if name == "pragma" and not pragma_ok(rest):
        return [f"uses #pragma {rest}: only {pragmas}"]
    return []


C_PRAGMAS = f"#pragma GCC ivdep and #pragma GCC unroll N (N up to {MAX_UNROLL})"


def c_pragma_ok(words: str) -> bool:
    """gcc's loop hints: `GCC ivdep`, `GCC unroll N` with a literal N up to MAX_UNROLL."""
    unroll = re.fullmatch(r"GCC\s+unroll\s+(\d+)", words.strip())
    return re.fullmatch(r"GCC\s+ivdep", words.strip()) is not None or (
        unroll is not None and int(unroll.group(1)) <= MAX_UNROLL)


CUDA_PRAGMAS = f"#pragma unroll, #pragma unroll N (N up to {MAX_UNROLL}) and #pragma nounroll"


def cuda_pragma_ok(words: str) -> bool:
    """nvcc's loop hints: `unroll`, `unroll N` or `unroll (N)` with a literal N up to MAX_UNROLL, `nounroll`."""
    unroll = re.fullmatch(r"unroll(\s+\(?\s*(\d+)\s*\)?)?", words.strip())
    return words.strip() == "nounroll" or (unroll is not None and int(unroll.group(2) or 1) <= MAX_UNROLL)


def preprocessed_code(text: str) -> tuple[str, list[str]]:
    """(the code of gcc -E's output without its line markers, the words of each #pragma in it)."""
    code, pragmas = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(r"#\s*\d", stripped):
            continue
        if stripped.startswith("#"):
            pragmas.append(re.sub(r"^#\s*pragma\s*", "", stripped) if re.match(r"#\s*pragma\b", stripped)
                           else stripped)
            continue
        code.append(line)
    return "\n".join(code), pragmas


def tokens(code: str) -> list[str]:
    """The tokens of preprocessed C: identifiers, numbers, literals, `[[`, single punctuation characters."""
    return _TOKEN.findall(code)


def token_problems(words: list[str], forbidden: dict[str, str], forbidden_calls: re.Pattern,
                   allowed_builtins: set[str]) -> list[str]:
    """What the preprocessed token stream holds that a kernel must not: forbidden words (a word, or a prefix
    ending in `*`, → why), calls of the functions `forbidden_calls` matches, `__builtin_` functions outside the allowed set, and C23 /
    C++11 attributes (`[[gnu::constructor]]`)."""
    exact = {k: v for k, v in forbidden.items() if not k.endswith("*")}
    prefixes = [(k[:-1], v) for k, v in forbidden.items() if k.endswith("*")]
    problems = []
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        if word in exact:
            problems.append(exact[word])
        problems += [why for prefix, why in prefixes if word.startswith(prefix)]
        if word == "[[":
            problems.append("uses a [[...]] attribute (e.g. a constructor that runs at load time)")
        if word.startswith("__builtin_") and word[len("__builtin_"):] not in allowed_builtins:
            problems.append(f"calls {word}, which a kernel may not use (it reaches the OS, the clock or the "
                            "stack)")
        if following == "(" and forbidden_calls.fullmatch(word):
            problems.append("calls a function that reaches the OS, threads or the clock")
    return list(dict.fromkeys(problems))


# --- binaries: sections, symbols, instructions ---------------------------------------------------------
def _binutil(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"the kernel link check needs {name} (binutils): install it with gcc")
    return path


def _output(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout


def elf_sections(path: str) -> dict[str, tuple[int, str]]:
    """Section name → (size in bytes, flags as readelf writes them: W writable, A allocated, X executable,
    T thread-local)."""
    sections = {}
    for line in _output(_binutil("readelf"), "-S", "--wide", path).splitlines():
        match = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+[0-9a-f]+\s+"
                         r"([A-Za-z]*)", line)
        if match:
            name, size, flags = match.groups()
            sections[name] = (sections.get(name, (0, ""))[0] + int(size, 16), flags)
    return sections


def undefined_symbols(path: str, dynamic: bool) -> list[tuple[str, str]]:
    """(kind, name) of the undefined symbols: U strong, w weak, v weak object; without version suffixes."""
    command = [_binutil("nm"), *(["-D"] if dynamic else []), "--undefined-only", path]
    rows = (line.split() for line in _output(*command).splitlines())
    return [(parts[-2], parts[-1].split("@")[0]) for parts in rows if len(parts) >= 2]


def instruction_counts(path: str) -> Counter:
    """How often each forbidden instruction occurs in the code sections of an object or library."""
    counts: Counter = Counter()
    for line in _output(_binutil("objdump"), "-d", "--no-show-raw-insn", path).splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not re.match(r"\s*[0-9a-f]+:$", parts[0]):
            continue
        # mnemonic and prefixes (`lock`, `rep`, `notrack`): the leading words before the operands
        for word in parts[1].split():
            if not re.fullmatch(r"[a-z][a-z0-9.]*", word):
                break
            if word in FORBIDDEN_INSTRUCTIONS:
                counts[word] += 1
    return counts


def got_relocations(path: str) -> int:
    """Dynamic relocations that fill a slot of the global offset table (one per imported symbol)."""
    table = _output(_binutil("readelf"), "-r", "--wide", path)
    return len(re.findall(r"_(GLOB_DAT|JUMP_SLOT|JUMP_SLO)\b", table))
