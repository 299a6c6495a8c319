"""The rollout engine: batched multi-turn episodes with an exact model-token mask and sampling logprobs."""

import pytest
import torch

from agentrl_lite.chat import render
from agentrl_lite.episode import Episode, Turn, is_void_turn
from agentrl_lite.models import tiny_policy
from agentrl_lite.rollout import RolloutConfig, rollout, sampling_batches
from agentrl_lite.sft import SFTConfig, sft, tokenize_conversation
from agentrl_lite.tasks.arithmetic import ArithmeticEnv, arithmetic_tasks, calculator_demonstration

TASK = arithmetic_tasks(1, seed=123)[0]


@pytest.fixture(scope="module")
def tool_user():
    """A tiny random model fine-tuned until it greedily reproduces one tool-use demonstration."""
    model, tokenizer = tiny_policy(seed=0)
    env = ArithmeticEnv()
    conversation = env.prompt(TASK)[:1] + calculator_demonstration(TASK)
    losses = sft(model, tokenizer, [conversation], env.toolbox_for().schemas,
                 SFTConfig(steps=60, batch_size=1, lr=3e-3, progress=False))
    assert losses[-1] < 0.05 * losses[0], "the tiny model did not memorise the demonstration"
    return model, tokenizer, env


def fresh_logprobs(model, token_ids, temperature=1.0):
    """log π(token_t | tokens_<t) from one forward pass over the whole, unpadded sequence."""
    ids = torch.tensor([token_ids])
    logits = model(input_ids=ids).logits[0, :-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)


@pytest.mark.slow
def test_multi_turn_episode_calls_the_tool_and_answers(tool_user):
    model, tokenizer, env = tool_user
    (ep,) = rollout(model, tokenizer, [env.prompt(TASK)], env.toolbox_for,
                    RolloutConfig(temperature=0, max_new_tokens=48, progress=False), metadata=[TASK])
    assert [t.role for t in ep.turns] == ["prompt", "model", "tool", "model"]
    assert ep.turns[1].tool_calls == [{"name": "calculator", "arguments": {"expression": TASK["expression"]}}]
    assert ep.turns[1].tool_results == [TASK["answer"]]  # the calculator really ran
    assert ep.stop_reason == "answer" and ep.answer == TASK["answer"]
    assert env.score(TASK, ep)["correct"] == 1.0


def test_mask_covers_exactly_the_model_tokens(tool_user):
    model, tokenizer, env = tool_user
    (ep,) = rollout(model, tokenizer, [env.prompt(TASK)], env.toolbox_for,
                    RolloutConfig(temperature=0, max_new_tokens=48, progress=False), metadata=[TASK])
    n = len(ep.token_ids)
    assert len(ep.logprobs) == len(ep.model_mask) == n
    expected = [0] * n
    for turn in ep.turns:
        if turn.role == "model":
            expected[turn.start:turn.end] = [1] * (turn.end - turn.start)
    assert ep.model_mask == expected
    # turns tile the sequence with no gap or overlap
    assert [t.start for t in ep.turns[1:]] == [t.end for t in ep.turns[:-1]] and ep.turns[-1].end == n
    # the tokens are exactly what the chat template renders for the same conversation
    rendered = render(tokenizer, ep.messages(), env.toolbox_for().schemas)
    assert tokenizer.decode(ep.token_ids, skip_special_tokens=False) == rendered.removesuffix("\n")
    # and the SFT tokenisation of that conversation marks the same tokens as the policy's
    ids, mask = tokenize_conversation(tokenizer, ep.messages(), env.toolbox_for().schemas)
    assert ids == ep.token_ids and mask == ep.model_mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_equal_a_fresh_forward_pass(tool_user, temperature):
    model, tokenizer, env = tool_user
    torch.manual_seed(0)
    tasks = arithmetic_tasks(6, seed=5)
    episodes = rollout(model, tokenizer, [env.prompt(t) for t in tasks], env.toolbox_for,
                       RolloutConfig(temperature=temperature, max_new_tokens=24, max_turns=2, batch_size=4,
                                     progress=False), metadata=tasks)
    with torch.no_grad():
        for ep in episodes:
            fresh = fresh_logprobs(model, ep.token_ids, temperature)
            mask = torch.tensor(ep.model_mask[1:], dtype=torch.bool)
            recorded = torch.tensor(ep.logprobs[1:])
            # batched, left-padded sampling vs one unpadded pass: same math, different summation order
            assert torch.allclose(recorded[mask], fresh[mask], atol=1e-4), (recorded[mask] - fresh[mask]).abs().max()
            assert (recorded[~mask] == 0).all()


def test_budgets_end_episodes_with_the_right_reason():
    model, tokenizer = tiny_policy(seed=1)
    env = ArithmeticEnv()
    prompt = env.prompt(TASK)
    (ep,) = rollout(model, tokenizer, [prompt], env.toolbox_for,
                    RolloutConfig(max_new_tokens=5, progress=False), metadata=[TASK])
    assert ep.stop_reason == "max_tokens" and not ep.turns[-1].finished and sum(ep.model_mask) == 5
    (ep,) = rollout(model, tokenizer, [prompt], env.toolbox_for,
                    RolloutConfig(max_episode_tokens=10, progress=False), metadata=[TASK])
    assert ep.stop_reason == "max_tokens" and len(ep.turns) == 1


def test_tool_call_in_the_last_allowed_turn_ends_with_max_turns(tool_user):
    model, tokenizer, env = tool_user
    (ep,) = rollout(model, tokenizer, [env.prompt(TASK)], env.toolbox_for,
                    RolloutConfig(temperature=0, max_turns=1, max_new_tokens=48, progress=False), metadata=[TASK])
    assert ep.stop_reason == "max_turns" and ep.num_tool_calls == 1 and ep.answer is None


def test_gradient_flows_only_through_model_tokens(tool_user):
    """The loss never sees the logits that predict prompt/tool tokens, and gets a gradient on every model token."""
    from agentrl_lite.logprobs import token_logprobs
    from agentrl_lite.loss import LossConfig, policy_loss

    model, tokenizer, env = tool_user
    (ep,) = rollout(model, tokenizer, [env.prompt(TASK)], env.toolbox_for,
                    RolloutConfig(temperature=0, max_new_tokens=48, progress=False), metadata=[TASK])
    assert 0 in ep.model_mask[ep.prompt_length:], "the episode needs tool tokens after the prompt"
    ids = torch.tensor([ep.token_ids])
    mask = torch.tensor([ep.model_mask])
    captured = {}

    def perturb_and_keep(module, args, output):
        captured["positions"] = output.shape[1]
        perturbed = output + 0.0  # a fresh tensor whose gradient we can read
        perturbed.retain_grad()
        captured["logits"] = perturbed
        return perturbed

    handle = model.lm_head.register_forward_hook(perturb_and_keep)
    try:
        logprobs = token_logprobs(model, ids, torch.ones_like(ids), mask)
        loss, _ = policy_loss(logprobs, logprobs.detach(), torch.tensor([1.0]), mask.float(), LossConfig())
        loss.backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    # only positions that predict a policy token are projected to the vocabulary at all ...
    assert captured["positions"] == sum(ep.model_mask[1:])
    # ... and each of them receives gradient
    assert captured["logits"].grad[0].abs().sum(-1).min() > 0
    # the tool tokens' own log-probs are exactly zero in the loss input
    assert (logprobs[0][mask[0] == 0] == 0).all()


# ------------------------------------------------------------------------------------------ void turns
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>'


@pytest.mark.parametrize(
    "content, finished, void",
    [
        (CALL, True, False),  # a complete, well-formed call: an action
        ("<answer>5</answer>", True, False),  # a final answer
        ("Let me think. <answer>5</answer>", False, False),  # cut by the budget after a complete answer
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+', False, True),  # never closed
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n', True, True),  # closed by eot
        # malformed JSON but closed: the environment answers with a parse error, as an interpreter answers a
        # complete code block that fails, so the turn is not void
        ('<tool_call>{"name": "calculator", "arguments": {"expression": 2+3}}</tool_call>', True, False),
        ("The answer is 5.", True, True),  # prose: no call, no answer (single-turn "no_answer")
        ("<answer>5", True, True),  # an answer never closed
        ("</tool_call> 5", True, True),  # a stray closing tag is no call
        ("", False, True),  # cut before writing anything
    ],
)
def test_void_turn_definition(content, finished, void):
    turn = Turn("model", 0, 1, content + "<|im_end|>" * finished, content=content, finished=finished)
    assert is_void_turn(turn) is void


def test_an_episode_has_a_void_turn_when_any_model_turn_is_void():
    def episode(*contents):
        turns = [Turn("prompt", 0, 1, "prompt")]
        for content in contents:
            turns.append(Turn("model", 0, 1, content, content=content))
            turns.append(Turn("tool", 0, 1, "<tool_response>Error</tool_response>", tool_results=["Error"]))
        return Episode(prompt=[], turns=turns[:-1])

    assert not episode(CALL, "<answer>5</answer>").has_void_turn
    assert episode("<tool_call>{", "<answer>5</answer>").has_void_turn  # a void turn the episode survived
    assert episode(CALL, "I give up.").has_void_turn
    assert not is_void_turn(Turn("tool", 0, 1, "", tool_results=[]))  # only model turns can be void


def test_rollout_episodes_are_void_exactly_when_they_end_without_call_or_answer(tool_user):
    model, tokenizer, env = tool_user
    (good,) = rollout(model, tokenizer, [env.prompt(TASK)], env.toolbox_for,
                      RolloutConfig(temperature=0, max_new_tokens=48, progress=False), metadata=[TASK])
    assert good.stop_reason == "answer" and not good.has_void_turn
    (cut,) = rollout(model, tokenizer, [env.prompt(TASK)], env.toolbox_for,
                     RolloutConfig(temperature=0, max_new_tokens=5, progress=False), metadata=[TASK])
    assert cut.stop_reason == "max_tokens" and "<tool_call>" in cut.turns[-1].content and cut.has_void_turn


@pytest.mark.slow
def test_sft_in_token_capped_passes_takes_the_same_steps():
    """SFTConfig.micro_batch_tokens splits a batch into passes; the loss and the update are the batch's."""
    env = ArithmeticEnv()
    tasks = arithmetic_tasks(6, seed=7)
    conversations = [env.prompt(t)[:1] + calculator_demonstration(t) for t in tasks]
    conversations[1] = conversations[1][:2]  # a shorter one: passes of unequal size
    results = []
    for cap in (None, 1):  # 1 token: every conversation alone
        model, tokenizer = tiny_policy(seed=0)
        losses = sft(model, tokenizer, conversations, env.toolbox_for().schemas,
                     SFTConfig(steps=3, batch_size=6, lr=1e-3, progress=False, micro_batch_tokens=cap))
        results.append((losses, torch.cat([p.detach().flatten() for p in model.parameters()])))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-4)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-5)


def test_sampling_batches_respect_the_row_and_token_limits_and_keep_the_old_batching_without_a_token_limit():
    lengths = [900, 40, 60, 1500, 50, 45, 1200, 55]
    plain = RolloutConfig(batch_size=3, max_new_tokens=100)
    # without batch_tokens: by length, shortest first, batch_size rows each (as before the token limit existed)
    assert sampling_batches(lengths, plain) == [[1, 5, 4], [7, 2, 0], [6, 3]]
    assert sampling_batches(lengths, RolloutConfig(batch_size=8)) == [list(range(8))]  # all fit: prompt order
    budgeted = RolloutConfig(batch_size=8, max_new_tokens=100, batch_tokens=2000)
    batches = sampling_batches(lengths, budgeted)
    assert sorted(i for b in batches for i in b) == list(range(8))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) == 1 or len(batch) * (longest + 100) <= 2000  # a row over the budget goes alone
    assert batches[0] == [1, 5, 4, 7, 2]  # the short ones share a batch; each long one gets its own
    assert [len(b) for b in batches] == [5, 1, 1, 1]
    with pytest.raises(ValueError, match="batch_tokens"):
        RolloutConfig(batch_tokens=0)
