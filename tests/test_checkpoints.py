"""Checkpoints in Hugging Face's format: what the trainer and SFT save reloads with `from_pretrained`,
`PeftModel.from_pretrained` and `load_policy`, and gives the log-probs the trained policy gave."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
from agentrl_lite.logprobs import token_logprobs
from agentrl_lite.models import load_policy, load_saved_weights, save_policy, tiny_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks.arithmetic import ArithmeticEnv, arithmetic_tasks

TASKS = arithmetic_tasks(8, seed=3)


def odd_token_reward(prompts, completions, episodes, **kwargs):
    """Something a random model's samples differ in, so a step has advantages and moves the weights."""
    return [sum(t % 2 for t, m in zip(ep.token_ids, ep.model_mask, strict=True) if m) / max(1, sum(ep.model_mask))
            for ep in episodes]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    model, tokenizer = tiny_policy(seed=0, init_std=1.0)
    path = tmp_path_factory.mktemp("base")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def trained(base_dir, tmp_path, lora=None):
    model, tokenizer = load_policy(str(base_dir), device="cpu", lora=lora)
    config = GRPOConfig(steps=1, prompts_per_step=2, group_size=4, lr=1e-2, seed=0, progress=False,
                        rollout=RolloutConfig(max_turns=1, max_new_tokens=6, temperature=1.0, progress=False))
    trainer = GRPOTrainer(model, tokenizer, ArithmeticEnv(tools=[]), TASKS, [odd_token_reward], config)
    trainer.train()
    return trainer, trainer.save_checkpoint(tmp_path / "checkpoint")


def logprobs(model):
    ids = torch.tensor([[5, 17, 230, 9, 41, 8, 77, 3]])
    with torch.no_grad():
        return token_logprobs(model.eval(), ids, torch.ones_like(ids), torch.ones_like(ids))


def test_a_full_checkpoint_reloads_with_from_pretrained_and_load_policy(base_dir, tmp_path):
    trainer, path = trained(base_dir, tmp_path)
    expected = logprobs(trainer.model)
    start, _ = load_policy(str(base_dir), device="cpu")
    assert not torch.equal(logprobs(start), expected), "the step changed nothing: the test could not fail"
    assert torch.equal(logprobs(AutoModelForCausalLM.from_pretrained(path)), expected)
    reloaded, tokenizer = load_policy(str(path), device="cpu")
    assert torch.equal(logprobs(reloaded), expected)
    assert tokenizer.chat_template == trainer.tokenizer.chat_template and tokenizer.padding_side == "left"
    assert AutoTokenizer.from_pretrained(path).chat_template == trainer.tokenizer.chat_template


def test_a_lora_checkpoint_is_an_adapter_that_reloads_on_its_base(base_dir, tmp_path):
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    trainer, path = trained(base_dir, tmp_path, lora=lora)
    expected = logprobs(trainer.model)
    assert (path / "adapter_model.safetensors").is_file() and not (path / "model.safetensors").exists()
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    assert not torch.equal(logprobs(base), expected), "the adapter changed nothing: the test could not fail"
    assert torch.equal(logprobs(PeftModel.from_pretrained(base, path)), expected)
    reloaded, _ = load_policy(str(path), device="cpu")  # the base named in adapter_config.json, then the adapter
    assert torch.equal(logprobs(reloaded), expected)
    assert {n for n, p in reloaded.named_parameters() if p.requires_grad} == {
        n for n, p in trainer.model.named_parameters() if p.requires_grad}, "the reloaded adapter must train on"
    with pytest.raises(ValueError, match="already"):
        load_policy(str(path), device="cpu", lora=lora)


def test_resuming_from_a_checkpoint_restores_the_weights_and_refuses_other_folders(base_dir, tmp_path):
    trainer, path = trained(base_dir, tmp_path)
    fresh = GRPOTrainer(*load_policy(str(base_dir), device="cpu"), ArithmeticEnv(tools=[]), TASKS,
                        [odd_token_reward], trainer.config)
    fresh.load_checkpoint(path)
    assert fresh.step_count == 1 and torch.equal(logprobs(fresh.model), logprobs(trainer.model))
    with pytest.raises(FileNotFoundError, match="trainer_state.pt"):
        fresh.load_checkpoint(base_dir)  # weights alone are not a checkpoint to resume
    deeper_config = copy.deepcopy(trainer.model.config)
    deeper_config.num_hidden_layers += 1
    with pytest.raises(ValueError, match="lacks"):  # a deeper model's extra layer would silently stay as it was
        load_saved_weights(AutoModelForCausalLM.from_config(deeper_config), path)


def test_sft_saves_the_policy_it_trained(base_dir, tmp_path):
    model, tokenizer = load_policy(str(base_dir), device="cpu")
    conversations = [[{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "<answer>4</answer>"}]]
    sft(model, tokenizer, conversations, None,
        SFTConfig(steps=1, batch_size=1, lr=1e-2, progress=False, output_dir=str(tmp_path / "sft")))
    reloaded, _ = load_policy(str(tmp_path / "sft"), device="cpu")
    assert torch.equal(logprobs(reloaded), logprobs(model))


def test_an_adapter_on_the_embedded_model_names_it_portably(tmp_path, monkeypatch):
    from agentrl_lite import models

    model, tokenizer = tiny_policy(seed=0)
    base = tmp_path / "cache"
    model.save_pretrained(base)
    monkeypatch.setattr(models, "embedded_checkpoint", lambda: base)  # stands in for the converted embedded model
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(task_type="CAUSAL_LM", r=2))
    save_policy(model, tokenizer, tmp_path / "adapter")
    named = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert named == models.EMBEDDED_MODEL, "a machine's cache folder must not be written into a portable adapter"
