"""The kernel tasks: 23 small operators in KernelBench's format, written for this course, and variants of
some with constants in them (`_variants`).

Each task has a PyTorch reference in KernelBench's format (a `Model` whose `forward` is the operator,
`get_inputs()`, `get_init_inputs()`), rendered for one of three shape sets:
- smoke: tiny, for tests and the smoke profile;
- cpu: large enough that a CPU timing is not dominated by call overhead (about a million elements);
- gpu: large enough that an H100 kernel is not launch-bound (16M elements, 4096², a 2048³ matmul).

What the policy writes for the `cpu_c` backend is one C function with a fixed signature: every input as a
`const float*` (row-major, contiguous), the output as `float* out`, then the sizes as `int`s, e.g.
`void kernel(const float* x, const float* bias, float* out, int rows, int cols)`. `naive_c` is a correct,
straightforward body for each task: the demonstrations of a cold start, and the "correct" candidate of tests.
"""

from __future__ import annotations

from dataclasses import dataclass

SHAPES: dict[str, dict[str, int]] = {
    "smoke": {"n": 4096, "rows": 8, "cols": 128, "m": 16, "k": 16, "p": 16},
    "cpu": {"n": 1 << 20, "rows": 256, "cols": 1024, "m": 128, "k": 128, "p": 128},
    "gpu": {"n": 1 << 24, "rows": 4096, "cols": 4096, "m": 2048, "k": 2048, "p": 2048},
}
"""size names → values per shape set"""
TOLERANCE = 1e-5
"""atol = rtol of the correctness check (`np.isclose`) unless a task sets its own: at least twice what a correct
kernel needs in any order of operations or precision of its intermediates, at most half what its output rounded to
float16's precision needs (docs/design/10_kernel_generation_rl.md)"""
ROW_SUM_TOLERANCE, GPU_ROW_SUM_TOLERANCE = 1e-4, 3.1e-4
"""a row sum's, at the smoke and cpu shapes and at the gpu shapes: a correct sum's rounding error grows with the
row's length (128, 1024, 4096), the float16-rounded sum's does not. At 4096 no tolerance is 2x from both: this is
the geometric middle"""
MATMUL_TOLERANCE = 3.3e-4
"""the matmul's, at every shape: where the shifted inputs cancel, PyTorch's own float32 sum errs almost as much as
the float16-rounded output. No tolerance is 2x from both: this is the geometric middle"""


@dataclass(frozen=True)
class KernelTask:
    """One operator: what to compute, its PyTorch reference, the C signature the candidate implements."""

    name: str
    description: str
    """what to compute, in words (shown to the policy)"""
    forward: str
    """the reference's forward expression in PyTorch, over the input names"""
    inputs: tuple[tuple[str, str], ...]
    """(name, shape as size names, e.g. "rows, cols") of each input, in the C signature's order"""
    sizes: tuple[str, ...]
    """the size names passed to the C function after `out`, in order"""
    naive_c: str
    """a correct, plain C body for the function (no speed tricks)"""
    split: str = "train"
    """"train", "validation" (train families with other constants, for tuning) or "heldout" (operators and
    families never trained on)"""
    tolerance: float = TOLERANCE
    """atol = rtol of the correctness check at the smoke and cpu shapes"""
    gpu_tolerance: float | None = None
    """atol = rtol at the gpu shapes, where a longer sum errs more; None: `tolerance`"""

    @property
    def family(self) -> str:
        """The operator without its constants: `leaky_0p1` → `leaky`; a named operator is its own family."""
        parts = self.name.split("_")
        while len(parts) > 1 and parts[-1][:1].isdigit():
            parts.pop()
        return "_".join(parts)

    def tolerance_at(self, shape: str) -> float:
        """atol = rtol of the correctness check at the sizes of the shape set `shape`."""
        if shape == "gpu" and self.gpu_tolerance is not None:
            return self.gpu_tolerance
        return self.tolerance

    @property
    def signature(self) -> str:
        args = [f"const float* {name}" for name, _ in self.inputs] + ["float* out"]
        return f"void kernel({', '.join(args + [f'int {s}' for s in self.sizes])})"

    def naive_source(self) -> str:
        """A complete, correct candidate: includes, the signature, the naive body."""
        return f"#include <math.h>\n\n{self.signature} {{\n{self.naive_c}\n}}\n"

    def reference_source(self, shape: str = "cpu") -> str:
        """The task in KernelBench's format, with the sizes of `shape` as module constants."""
        dims = SHAPES[shape]
        names = ", ".join(name for name, _ in self.inputs)
        inputs = ", ".join(f"torch.randn({dims_of})" for _, dims_of in self.inputs)
        constants = "\n".join(f"{s} = {dims[s]}" for s in sorted({d.strip() for _, ds in self.inputs
                                                                    for d in ds.split(",")} | set(self.sizes)))
        return (f"import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                f"    \"\"\"{self.description}\"\"\"\n\n"
                f"    def __init__(self):\n        super().__init__()\n\n"
                f"    def forward(self, {names}):\n        return {self.forward}\n\n\n"
                f"{constants}\n\n\ndef get_inputs():\n    return [{inputs}]\n\n\n"
                f"def get_init_inputs():\n    return []\n")


def _elementwise(name: str, description: str, forward: str, expression: str, split: str = "train",
                 inputs: tuple[str, ...] = ("x",)) -> KernelTask:
    """out[i] = expression(inputs[i]) over n elements."""
    return KernelTask(name, description, forward, tuple((i, "n") for i in inputs), ("n",),
                      f"    for (int i = 0; i < n; i++) {{\n        out[i] = {expression};\n    }}", split)


def _bias(name: str, description: str, forward: str, expression: str, split: str = "train",
          extra: tuple[str, ...] = ()) -> KernelTask:
    """out[r][c] = expression(v) with v = x[r][c] + bias[c], over a (rows, cols) matrix."""
    inputs = (("x", "rows, cols"), ("bias", "cols")) + tuple((e, "rows, cols") for e in extra)
    extra_reads = "".join(f"        float {e}_v = {e}[r * cols + c];\n" for e in extra)
    body = ("    for (int r = 0; r < rows; r++) {\n        for (int c = 0; c < cols; c++) {\n"
            "            float v = x[r * cols + c] + bias[c];\n"
            + extra_reads.replace("        float", "            float")
            + f"            out[r * cols + c] = {expression};\n        }}\n    }}")
    return KernelTask(name, description, forward, inputs, ("rows", "cols"), body, split)


def _rows(name: str, description: str, forward: str, body: str, split: str = "train",
          tolerance: float = TOLERANCE, gpu_tolerance: float | None = None) -> KernelTask:
    """A row-wise operator over a (rows, cols) matrix x; the body loops over rows itself."""
    return KernelTask(name, description, forward, (("x", "rows, cols"),), ("rows", "cols"), body, split, tolerance,
                      gpu_tolerance)


_SOFTMAX = """    for (int r = 0; r < rows; r++) {
        const float* row = x + r * cols;
        float m = row[0];
        for (int c = 1; c < cols; c++) m = row[c] > m ? row[c] : m;
        float s = 0.0f;
        for (int c = 0; c < cols; c++) { out[r * cols + c] = expf(row[c] - m); s += out[r * cols + c]; }
        for (int c = 0; c < cols; c++) out[r * cols + c] /= s;
    }"""
_LAYERNORM = """    for (int r = 0; r < rows; r++) {
        const float* row = x + r * cols;
        float mean = 0.0f, var = 0.0f;
        for (int c = 0; c < cols; c++) mean += row[c];
        mean /= cols;
        for (int c = 0; c < cols; c++) var += (row[c] - mean) * (row[c] - mean);
        var /= cols;
        float inv = 1.0f / sqrtf(var + 1e-5f);
        for (int c = 0; c < cols; c++) out[r * cols + c] = (row[c] - mean) * inv;
    }"""
_RMSNORM = """    for (int r = 0; r < rows; r++) {
        const float* row = x + r * cols;
        float ss = 0.0f;
        for (int c = 0; c < cols; c++) ss += row[c] * row[c];
        float inv = 1.0f / sqrtf(ss / cols + 1e-6f);
        for (int c = 0; c < cols; c++) out[r * cols + c] = row[c] * inv;
    }"""
_ROW_REDUCE = """    for (int r = 0; r < rows; r++) {{
        float acc = {init};
        for (int c = 0; c < cols; c++) {{
            float v = x[r * cols + c];
            acc = {update};
        }}
        out[r] = {final};
    }}"""
_MATMUL = """    for (int i = 0; i < m; i++) {{
        for (int j = 0; j < p; j++) {{
            float acc = 0.0f;
            for (int t = 0; t < k; t++) acc += a[i * k + t] * b[t * p + j];
            float v = acc + bias[j];
            out[i * p + j] = {epilogue};
        }}
    }}"""

TASKS: list[KernelTask] = [
    _elementwise("relu", "ReLU: out[i] = max(x[i], 0)", "torch.relu(x)", "x[i] > 0.0f ? x[i] : 0.0f"),
    _elementwise("leaky_relu", "Leaky ReLU with slope 0.01: out[i] = x[i] if x[i] > 0 else 0.01 * x[i]",
                 "torch.nn.functional.leaky_relu(x, 0.01)", "x[i] > 0.0f ? x[i] : 0.01f * x[i]", "heldout"),
    _elementwise("sigmoid", "Sigmoid: out[i] = 1 / (1 + exp(-x[i]))", "torch.sigmoid(x)",
                 "1.0f / (1.0f + expf(-x[i]))"),
    _elementwise("silu", "SiLU: out[i] = x[i] / (1 + exp(-x[i]))", "torch.nn.functional.silu(x)",
                 "x[i] / (1.0f + expf(-x[i]))"),
    _elementwise("tanh", "Hyperbolic tangent: out[i] = tanh(x[i])", "torch.tanh(x)", "tanhf(x[i])", "heldout"),
    _elementwise("gelu_tanh", "GELU, tanh approximation: 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))",
                 "torch.nn.functional.gelu(x, approximate='tanh')",
                 "0.5f * x[i] * (1.0f + tanhf(0.7978845608f * (x[i] + 0.044715f * x[i] * x[i] * x[i])))"),
    _elementwise("square", "Square: out[i] = x[i] * x[i]", "x * x", "x[i] * x[i]"),
    _elementwise("clamp", "Clamp to [-1, 1]: out[i] = min(max(x[i], -1), 1)", "torch.clamp(x, -1.0, 1.0)",
                 "x[i] < -1.0f ? -1.0f : (x[i] > 1.0f ? 1.0f : x[i])"),
    _elementwise("add", "Sum of two tensors: out[i] = a[i] + b[i]", "a + b", "a[i] + b[i]", inputs=("a", "b")),
    _elementwise("mul_add", "Fused multiply-add: out[i] = a[i] * b[i] + c[i]", "a * b + c", "a[i] * b[i] + c[i]",
                 inputs=("a", "b", "c")),
    _elementwise("scale_shift", "Scale and shift: out[i] = 2.5 * x[i] + 1.0", "x * 2.5 + 1.0",
                 "2.5f * x[i] + 1.0f", "heldout"),
    _elementwise("abs_diff", "Absolute difference: out[i] = |a[i] - b[i]|", "torch.abs(a - b)",
                 "fabsf(a[i] - b[i])", inputs=("a", "b")),
    _bias("bias_relu", "Bias then ReLU: out[r][c] = max(x[r][c] + bias[c], 0)", "torch.relu(x + bias)",
          "v > 0.0f ? v : 0.0f"),
    _bias("bias_sigmoid_scale", "Bias, sigmoid, times 2: out[r][c] = 2 / (1 + exp(-(x[r][c] + bias[c])))",
          "2.0 * torch.sigmoid(x + bias)", "2.0f / (1.0f + expf(-v))"),
    _bias("bias_gelu", "Bias then GELU (tanh approximation) of v = x[r][c] + bias[c]",
          "torch.nn.functional.gelu(x + bias, approximate='tanh')",
          "0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))", "heldout"),
    _bias("bias_relu_residual", "Bias, ReLU, plus a residual: out[r][c] = max(x[r][c] + bias[c], 0) + res[r][c]",
          "torch.relu(x + bias) + res", "(v > 0.0f ? v : 0.0f) + res_v", extra=("res",)),
    _rows("row_sum", "Sum of each row: out[r] = sum over c of x[r][c]", "x.sum(dim=1)",
          _ROW_REDUCE.format(init="0.0f", update="acc + v", final="acc"), tolerance=ROW_SUM_TOLERANCE,
          gpu_tolerance=GPU_ROW_SUM_TOLERANCE),
    _rows("row_max", "Maximum of each row: out[r] = max over c of x[r][c]", "x.max(dim=1).values",
          _ROW_REDUCE.format(init="-INFINITY", update="v > acc ? v : acc", final="acc")),
    _rows("row_rms", "Root mean square of each row: out[r] = sqrt(mean over c of x[r][c]^2)",
          "torch.sqrt((x * x).mean(dim=1))", _ROW_REDUCE.format(init="0.0f", update="acc + v * v",
                                                                final="sqrtf(acc / cols)"), "heldout"),
    _rows("softmax", "Softmax of each row (subtract the row maximum before exp for stability)",
          "torch.softmax(x, dim=1)", _SOFTMAX),
    _rows("layernorm", "Layer normalisation of each row without affine parameters, eps = 1e-5 "
          "(biased variance)", "torch.nn.functional.layer_norm(x, (x.shape[1],), eps=1e-5)", _LAYERNORM),
    _rows("rmsnorm", "RMS normalisation of each row: x[r][c] / sqrt(mean over c of x[r][c]^2 + 1e-6)",
          "x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-6)", _RMSNORM, "heldout"),
    KernelTask("matmul_bias_relu", "Matrix product a (m, k) @ b (k, p), plus bias (p,), then ReLU",
               "torch.relu(a @ b + bias)", (("a", "m, k"), ("b", "k, p"), ("bias", "p")), ("m", "k", "p"),
               _MATMUL.format(epilogue="v > 0.0f ? v : 0.0f"), tolerance=MATMUL_TOLERANCE),
]
"""the named operators, train and held-out"""


def _num(v: float) -> str:
    """A constant as the description and PyTorch write it (1.5, 0.25)."""
    return f"{v:g}"


def _c(v: float) -> str:
    """A constant as a C float literal (1.5f, 0.25f, 2.0f)."""
    text = f"{v:g}"
    return f"{text}{'' if '.' in text or 'e' in text else '.0'}f"


def _variants() -> list[KernelTask]:
    """Operators with constants in them, several constants each: the description is the only place the
    constant appears, so copying the nearest training kernel is not enough — the policy must read the task.

    The families of the train split and the held-out split differ (a held-out family is never trained on in
    any of its constants); the validation split holds train families with constants no training task uses, for
    choosing hyper-parameters without touching the held-out tasks."""
    tasks: list[KernelTask] = []
    families = {
        # name: (constants per split, description, PyTorch forward, C expression), with {a}/{b} the constants
        "scale": ({"train": [(1.5,), (3.0,), (0.25,), (4.0,)], "validation": [(2.0,), (0.75,)]},
                  "Scale: out[i] = {a} * x[i]", "x * {a}", "{ca} * x[i]"),
        "shift_relu": ({"train": [(0.5,), (1.0,), (2.0,)], "validation": [(1.5,), (0.25,)]},
                       "Shift then ReLU: out[i] = max(x[i] + {a}, 0)", "torch.relu(x + {a})",
                       "x[i] + {ca} > 0.0f ? x[i] + {ca} : 0.0f"),
        "clamp_range": ({"train": [(0.5,), (2.0,), (3.0,)], "validation": [(1.5,), (0.25,)]},
                        "Clamp to [-{a}, {a}]: out[i] = min(max(x[i], -{a}), {a})", "torch.clamp(x, -{a}, {a})",
                        "x[i] < -{ca} ? -{ca} : (x[i] > {ca} ? {ca} : x[i])"),
        "scaled_sigmoid": ({"train": [(2.0,), (0.5,), (3.0,)], "validation": [(4.0,), (1.5,)]},
                           "Scaled sigmoid: out[i] = {a} / (1 + exp(-x[i]))", "{a} * torch.sigmoid(x)",
                           "{ca} / (1.0f + expf(-x[i]))"),
        "leaky": ({"heldout": [(0.1,), (0.2,), (0.05,), (0.3,)]},
                  "Leaky ReLU with slope {a}: out[i] = x[i] if x[i] > 0 else {a} * x[i]",
                  "torch.nn.functional.leaky_relu(x, {a})", "x[i] > 0.0f ? x[i] : {ca} * x[i]"),
        "affine": ({"heldout": [(0.5, 2.0), (3.0, 0.5), (1.5, 1.5), (4.0, 1.0)]},
                   "Scale and shift: out[i] = {a} * x[i] + {b}", "x * {a} + {b}", "{ca} * x[i] + {cb}"),
        "scaled_tanh": ({"heldout": [(2.0,), (0.5,), (3.0,)]},
                        "Scaled hyperbolic tangent: out[i] = {a} * tanh(x[i])", "{a} * torch.tanh(x)",
                        "{ca} * tanhf(x[i])"),
    }
    for family, (splits, description, forward, expression) in families.items():
        for split, constants in splits.items():
            for values in constants:
                names = dict(zip("ab"[:len(values)], values, strict=True))
                fill = {**{k: _num(v) for k, v in names.items()}, **{f"c{k}": _c(v) for k, v in names.items()}}
                suffix = "_".join(_num(v).replace(".", "p") for v in values)
                tasks.append(_elementwise(f"{family}_{suffix}", description.format(**fill), forward.format(**fill),
                                          expression.format(**fill), split))
    for split, constants in {"train": [2.0, 0.5, 3.0], "validation": [1.5], "heldout": []}.items():
        for s in constants:  # a bias family with a constant: bias, ReLU, times s
            tasks.append(_bias(f"bias_relu_scale_{_num(s).replace('.', 'p')}",
                               f"Bias, ReLU, times {_num(s)}: out[r][c] = {_num(s)} * max(x[r][c] + bias[c], 0)",
                               f"{_num(s)} * torch.relu(x + bias)", f"{_c(s)} * (v > 0.0f ? v : 0.0f)", split))
    for split, constants in {"train": [0.5, 2.0], "validation": [0.25], "heldout": []}.items():
        for s in constants:  # a row reduction with a constant
            tasks.append(_rows(f"row_sum_scale_{_num(s).replace('.', 'p')}",
                               f"Scaled sum of each row: out[r] = {_num(s)} * (sum over c of x[r][c])",
                               f"{_num(s)} * x.sum(dim=1)",
                               _ROW_REDUCE.format(init="0.0f", update="acc + v", final=f"{_c(s)} * acc"), split,
                               tolerance=ROW_SUM_TOLERANCE, gpu_tolerance=GPU_ROW_SUM_TOLERANCE))
    return tasks


TASKS += _variants()
"""every task: the named operators and their variants with constants, in three splits (train, validation,
held-out)"""


def task_by_name(name: str) -> KernelTask:
    for task in TASKS:
        if task.name == name:
            return task
    raise KeyError(f"no kernel task named {name!r}; known: {', '.join(t.name for t in TASKS)}")
