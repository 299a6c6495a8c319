"""Tools (pipeline stage: what an episode can do besides writing text): `Toolbox`, the one tool interface,
and the course's tools, `calculator`, `python` and `SearchIndex.search` (BM25 over a local corpus).

For an LLM agent a tool is just a Python function. The policy cannot call it directly; it writes a
`<tool_call>` block (see `agentrl_lite.chat`), the environment runs the function, and the result comes back
as a new message the policy reads on its next turn. A small model that answers 17*23 = 381 on its own
gets it right every time once it learns to hand the arithmetic to `calculator`.

Why schemas. The model only knows a tool exists because its description is rendered into the prompt. We
write each tool as a typed function with a Google-style docstring and let transformers' `get_json_schema`
turn it into the JSON schema that chat templates render (`apply_chat_template(..., tools=schemas)`): the
function, its documentation and what the model is shown can never drift apart.

Why errors are observations. During RL the policy calls tools with whatever it samples: unknown names,
missing arguments, strings where numbers belong, expressions that divide by zero. None of that may raise
out of the toolbox and kill a training run. Every failure becomes a tool result starting with `Error:`
that says what was wrong and how to fix it; the model reads it, and RL can teach it to avoid (or recover
from) the mistake.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from transformers.utils import get_json_schema

from agentrl_lite.chat import ToolCall, parse_tool_calls
from agentrl_lite.phases import timed

# ---------------------------------------------------------------------------------------------------------
# calculator: an arithmetic evaluator that walks the syntax tree (never eval/exec)
# ---------------------------------------------------------------------------------------------------------

MAX_EXPRESSION_CHARS = 200
"""longer expressions are rejected before parsing"""
MAX_DEPTH = 100
"""deepest syntax tree walked (a chain `1+1+...+1` of 100 terms fits in 200 characters)"""
MAX_EXPONENT = 1000
"""largest |exponent| accepted by ** (keeps float powers and int powers bounded)"""
MAX_DIGITS = 1000
"""largest integer result, in decimal digits (checked before computing a power, after every other step)"""

_INT_LIMIT = 10**MAX_DIGITS
_BINARY_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    # name: (function, fewest arguments, most arguments or None for any number)
    "abs": (abs, 1, 1),
    "round": (round, 1, 2),
    "min": (min, 2, None),
    "max": (max, 2, None),
    "sqrt": (math.sqrt, 1, 1),
}
_ACCEPTS = (
    "The calculator accepts numbers, parentheses, the operators + - * / // % ** and the functions "
    + ", ".join(_FUNCTIONS)
    + "."
)


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message is what the model reads (after "Error: ")."""


def _check_size(value: int | float) -> int | float:
    """Keep every intermediate result a real, finite number of bounded size."""
    if isinstance(value, complex):
        raise CalculatorError(
            "the result is not a real number (e.g. a fractional power of a negative number)."
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large (floating-point overflow).")
    if isinstance(value, int) and abs(value) >= _INT_LIMIT:
        raise CalculatorError(f"the result has more than {MAX_DIGITS} digits.")
    return value


def _power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"the exponent {exponent} is too large (the limit is ±{MAX_EXPONENT}).")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        # a lower bound on the result's size, checked before computing it
        if (abs(base).bit_length() - 1) * exponent > MAX_DIGITS * math.log2(10):
            raise CalculatorError(f"the result has more than {MAX_DIGITS} digits.")
    return base**exponent


def _call_function(name: str, args: list[int | float]) -> int | float:
    function, fewest, most = _FUNCTIONS[name]
    if len(args) < fewest or (most is not None and len(args) > most):
        expected = str(fewest) if fewest == most else f"{fewest} or {most}" if most else f"at least {fewest}"
        noun = "argument" if expected == "1" else "arguments"
        raise CalculatorError(f"{name}() takes {expected} {noun}, got {len(args)}.")
    if name == "round" and len(args) == 2 and (not isinstance(args[1], int) or abs(args[1]) > 100):
        raise CalculatorError("round(x, n) needs a whole number n between -100 and 100.")
    if name == "sqrt" and args[0] < 0:
        raise CalculatorError("sqrt of a negative number.")
    return function(*args)


def _evaluate(node: ast.AST, depth: int = 0) -> int | float:
    """Evaluate an arithmetic syntax tree, accepting only the nodes listed in `_ACCEPTS`."""
    if depth > MAX_DEPTH:
        raise CalculatorError(f"the expression is nested too deeply (more than {MAX_DEPTH} levels).")
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, depth + 1)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"only numbers are allowed, got {node.value!r}. {_ACCEPTS}")
        return _check_size(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        return _check_size(_BINARY_OPS[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError(f"{node.func.id}() takes plain positional arguments only.")
        args = [_evaluate(a, depth + 1) for a in node.args]
        return _check_size(_call_function(node.func.id, args))
    if isinstance(node, ast.Name):
        raise CalculatorError(f"unknown name {node.id!r}. {_ACCEPTS}")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name | ast.Attribute):
            raise CalculatorError(f"unknown function {ast.unparse(node.func)!r}. {_ACCEPTS}")
        raise CalculatorError(
            f"{ast.unparse(node.func)!r} cannot be called (is an operator missing?). {_ACCEPTS}"
        )
    raise CalculatorError(f"unsupported syntax ({type(node).__name__}). {_ACCEPTS}")


def format_number(value: int | float) -> str:
    """How the calculator writes a result.

    Integers exactly. Floats rounded to 10 decimal places (so 0.1+0.2 gives 0.3), written without ".0"
    when whole (6/3 gives 2); tiny floats (below 1e-4) with 10 significant digits (1e-12 stays 1e-12).
    """
    if isinstance(value, int):
        return str(value)
    if value != 0 and abs(value) < 1e-4:
        return f"{value:.10g}"
    value = round(value, 10)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: The arithmetic expression, e.g. "17*23" or "(2.5 + 4) / 3". Supports + - * / // % **,
            parentheses, abs, round, min, max and sqrt.
    """
    expression = expression.strip()
    if not expression:
        return "Error: the expression is empty."
    if len(expression) > MAX_EXPRESSION_CHARS:
        return f"Error: the expression is too long ({len(expression)} characters; the limit is {MAX_EXPRESSION_CHARS})."
    try:
        with warnings.catch_warnings():  # e.g. "3(4)" warns "int is not callable"; we report it ourselves
            warnings.simplefilter("ignore")
            tree = ast.parse(expression, mode="eval")  # parsing only builds a tree; nothing is executed
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return f"Error: {expression!r} is not a valid arithmetic expression. {_ACCEPTS}"
    try:
        return format_number(_evaluate(tree))
    except CalculatorError as e:
        return f"Error: {e}"
    except ZeroDivisionError:
        return "Error: division by zero."
    except OverflowError:
        return "Error: the result is too large."


# ---------------------------------------------------------------------------------------------------------
# python: code execution in the sandbox
# ---------------------------------------------------------------------------------------------------------


def run_python(code: str, timeout_s: float = 5.0) -> str:
    """Run `code` in the sandbox (`agentrl_lite.sandbox.run_python`) and return its output as text."""
    from agentrl_lite.sandbox import run_python as sandbox_run_python  # lazy: the sandbox is optional

    return sandbox_run_python(code, timeout_s=timeout_s)


def python(code: str) -> str:
    """Run Python code in a sandbox and return what it printed (stdout and stderr).

    Args:
        code: A complete Python program. Use print() to show results; there is no network access and the
            run is stopped after 5 seconds.
    """
    return run_python(code, timeout_s=5.0)


# ---------------------------------------------------------------------------------------------------------
# search: BM25 over a local corpus (bm25s)
# ---------------------------------------------------------------------------------------------------------

MAX_SEARCH_RESULTS = 10
"""largest k the search tool accepts"""
MAX_QUERY_CHARS = 300
"""longer queries are rejected"""
SNIPPET_CHARS = 240
"""each returned document is cut to this many characters"""


def import_bm25s():
    """The `bm25s` module, imported with JAX (if installed) kept on the CPU.

    At import, bm25s runs one JAX top-k when JAX is installed, to pick its fastest selection. On a GPU machine
    that first JAX call reserves three quarters of the GPU's memory for JAX (its default), which the PyTorch
    policy in the same process then cannot have: on a lent H200 a lesson's kernel held 105 GiB this way and
    the other lessons on the card ran out of memory. The course's indexes hold a few thousand documents, and
    their top-k is small work for the CPU (not timed against the GPU). `JAX_PLATFORMS` is set only when JAX is
    not imported yet and the user has not set it.
    """
    if "jax" not in sys.modules:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import bm25s

    return bm25s


class SearchIndex:
    """A BM25 index over titled documents, whose bound `search` method is the course's search tool.

    Built once per corpus with `bm25s` (title and text are indexed together, English stop words dropped,
    no stemming) and cached on disk under `cache_dir`, keyed by a hash of the corpus, so a later process
    loads it instead of indexing again.
    """

    def __init__(self, documents: Sequence[dict[str, str]], cache_dir: str | None = None) -> None:
        """documents: dicts with "id", "title" and "text". cache_dir: where indexes are kept (None: memory only)."""
        import hashlib
        from pathlib import Path

        bm25s = import_bm25s()
        if not documents:
            raise ValueError("SearchIndex needs at least one document")
        self.documents = [dict(d) for d in documents]
        digest = hashlib.sha256(json.dumps(self.documents, sort_keys=True).encode()).hexdigest()[:16]
        folder = Path(cache_dir) / f"bm25_{digest}" if cache_dir is not None else None
        if folder is not None and (folder / "params.index.json").exists():
            self.retriever = bm25s.BM25.load(str(folder), show_progress=False, verbosity=0)
        else:
            self.retriever = bm25s.BM25()
            self.retriever.index(bm25s.tokenize([f"{d['title']}. {d['text']}" for d in self.documents],
                                                stopwords="en", show_progress=False), show_progress=False)
            if folder is not None:
                tmp = folder.with_name(folder.name + ".tmp")
                self.retriever.save(str(tmp), show_progress=False)
                tmp.rename(folder)  # atomic: a half-written index is never loaded
        self.vocabulary = self.retriever.vocab_dict

    def top(self, query: str, k: int = 3) -> list[dict[str, str]]:
        """The k best documents for `query` (fewer when fewer contain any of its words), best first."""
        bm25s = import_bm25s()
        words = [w for w in bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
                 if w in self.vocabulary]
        if not words:
            return []
        scores = self.retriever.get_scores(words)  # one BM25 score per document
        # best first; equal scores in document order, so that ties (documents sharing only a common word) never
        # depend on how a numpy release happens to partition them (bm25s.retrieve's top-k does)
        best = np.argsort(-scores, kind="stable")[:k]
        return [self.documents[int(i)] for i in best if scores[i] > 0]

    def search(self, query: str, k: int = 3) -> str:
        """Search the encyclopedia and return the best-matching documents, best first.

        Args:
            query: What to look for, e.g. a name.
            k: How many documents to return (1 to 10).
        """
        if not query.strip():
            raise ValueError("the query is empty; search for a name or a few words from the question")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"the query is longer than {MAX_QUERY_CHARS} characters; search for a name")
        if not 1 <= k <= MAX_SEARCH_RESULTS:
            raise ValueError(f"k must be between 1 and {MAX_SEARCH_RESULTS}, got {k}")
        found = self.top(query, k)
        if not found:
            return f"No document matches {query!r}."
        return "\n".join(f"[{i}] {d['title']}: {_snippet(d['text'])}" for i, d in enumerate(found, 1))


def _snippet(text: str) -> str:
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 3].rstrip() + "..."


# ---------------------------------------------------------------------------------------------------------
# Toolbox: schemas for the prompt, and execution that never raises
# ---------------------------------------------------------------------------------------------------------

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),  # an integer is a valid number
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_error(value: Any, schema: dict[str, Any], path: str) -> str | None:
    """Why `value` (found at `path`, e.g. `values[1]`) does not fit a JSON-schema fragment from
    `get_json_schema`; None when it fits.

    Checks "type" (one or a list), "nullable", "enum", array "items" and object "additionalProperties";
    fragments without a type (e.g. `Any`) accept anything.
    """
    if value is None and schema.get("nullable"):
        return None
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        known = [n for n in names if n in _PYTHON_TYPES]
        fits = any(
            isinstance(value, _PYTHON_TYPES[n])
            and not (isinstance(value, bool) and n in ("integer", "number"))
            for n in known
        )
        if known and not fits:
            return f"'{path}' must be {' or '.join(_article(n) for n in names)}, got {_describe(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"'{path}' must be one of {', '.join(json.dumps(v) for v in schema['enum'])}, got {_describe(value)}"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if (why := _type_error(item, schema["items"], f"{path}[{i}]")) is not None:
                return why
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            if (
                why := _type_error(item, schema["additionalProperties"], f"{path}[{json.dumps(key)}]")
            ) is not None:
                return why
    return None


def _article(type_name: str) -> str:
    return f"an {type_name}" if type_name[0] in "aeiou" else f"a {type_name}"


def _describe(value: Any) -> str:
    """A short description of a JSON value for an error message: its type and (abridged) value."""
    kind = next((n for n, types in _PYTHON_TYPES.items() if isinstance(value, types)), type(value).__name__)
    if isinstance(value, bool):
        kind = "boolean"
    shown = json.dumps(value, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{_article(kind)} ({shown})"


def _as_text(result: Any) -> str:
    """A tool's return value as the text the model reads: strings as-is, JSON values dumped, else str()."""
    if isinstance(result, str):
        return result
    if result is None or isinstance(result, bool | int | float | list | tuple | dict):
        return json.dumps(result, ensure_ascii=False, default=str)
    return str(result)


class Toolbox:
    """The tools offered in an episode: their schemas (for the prompt) and a safe way to execute calls.

    `execute` and `run` never raise on anything the model writes; every failure is returned as an
    `Error: ...` observation. Constructing a Toolbox does raise (ValueError) on a programming mistake: a
    function without type hints or docstring, or two tools with the same name.

    This is the only tool interface the rollout engine knows. Tools known only by a schema (BFCL's functions,
    which are shown to the model but never run) are a subclass that overrides `execute`
    (`agentrl_lite.tasks.function_calls.SchemaToolbox`).
    """

    def __init__(self, tools: Sequence[Callable[..., Any]]) -> None:
        self.functions: dict[str, Callable[..., Any]] = {}
        self.schemas: list[dict[str, Any]] = []
        """one JSON schema per tool, in order: pass as `apply_chat_template(..., tools=toolbox.schemas)`"""
        for function in tools:
            try:
                schema = get_json_schema(function)
            except Exception as e:
                raise ValueError(
                    f"Cannot build a schema for tool {getattr(function, '__name__', function)!r}: give it type "
                    f"hints and a Google-style docstring with an Args: section ({e})."
                ) from e
            name = schema["function"]["name"]
            if name in self.functions:
                raise ValueError(f"Two tools are named {name!r}; tool names must be unique.")
            self.functions[name] = function
            self.schemas.append(schema)

    @property
    def names(self) -> list[str]:
        """the tool names, in the order of `schemas`"""
        return [schema["function"]["name"] for schema in self.schemas]

    def _signature(self, name: str) -> str:
        """e.g. `expression (string, required)`, for error messages."""
        parameters = self._parameters(name)
        required = set(parameters.get("required", []))
        parts = []
        for arg, spec in parameters.get("properties", {}).items():
            kind = spec.get("type", "any")
            kind = " or ".join(kind) if isinstance(kind, list) else kind
            parts.append(f"{arg} ({kind}, {'required' if arg in required else 'optional'})")
        return ", ".join(parts) or "none"

    def _parameters(self, name: str) -> dict[str, Any]:
        return self.schemas[self.names.index(name)]["function"]["parameters"]

    def validate(self, call: ToolCall) -> str | None:
        """Why `call` cannot be executed (an `Error: ...` message), or None when it matches its schema."""
        if not isinstance(call.name, str) or call.name not in self.functions:
            return f"Error: unknown tool {call.name!r}. Available tools: {', '.join(self.names)}."
        if not isinstance(call.arguments, dict):
            return f"Error: the arguments of {call.name} must be a JSON object. Its arguments: {self._signature(call.name)}."
        parameters = self._parameters(call.name)
        properties = parameters.get("properties", {})
        for arg in call.arguments:
            if arg not in properties:
                return (
                    f"Error: {call.name} got an unexpected argument {arg!r}. "
                    f"Its arguments: {self._signature(call.name)}."
                )
        for arg in parameters.get("required", []):
            if arg not in call.arguments:
                kind = properties[arg].get("type", "any")
                return (
                    f"Error: {call.name} is missing the required argument {arg!r} ({kind}). "
                    f"Its arguments: {self._signature(call.name)}."
                )
        for arg, value in call.arguments.items():
            if (why := _type_error(value, properties[arg], arg)) is not None:
                return f"Error: {call.name}: argument {why}."
        return None

    @timed("environment")
    def execute(self, call: ToolCall) -> str:
        """Run one call and return the observation the model will read. Never raises."""
        if (error := self.validate(call)) is not None:
            return error
        try:
            return _as_text(self.functions[call.name](**call.arguments))
        except (Exception, SystemExit) as e:  # a tool bug or a hostile input must not end the run
            return f"Error: {call.name} raised {type(e).__name__}: {e}"

    def run(self, text: str) -> tuple[list[ToolCall], list[str]]:
        """Parse a model turn and execute its calls.

        Returns (calls, observations): `calls` are the well-formed calls; `observations` hold one string
        per `<tool_call>` block *in order of appearance*, the tool's result for a well-formed call and the
        parse error for a malformed one. So `len(observations) == len(calls) + number of parse errors`, and
        the i-th observation answers the i-th block the model wrote.
        """
        parsed = parse_tool_calls(text)
        observations = [self.execute(b) if isinstance(b, ToolCall) else b for b in parsed.blocks]
        return parsed.calls, observations
