"""viz: segments cover the episode exactly, HTML colours the right text, plots draw what they are given."""

import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from agentrl_lite.episode import Episode, Turn  # noqa: E402
from agentrl_lite.viz import (  # noqa: E402
    COLORS,
    episode_html,
    episode_label,
    episode_segments,
    plot_bars,
    plot_curves,
    plot_seed_study,
    plot_token_probs,
    trajectory_viewer,
)

MODEL_TURN = '<tool_call>\n{"name": "calc", "arguments": {"expr": "17*23"}}\n</tool_call><|im_end|>'
TOOL_TURN = "\n<|im_start|>tool\n<tool_response>\n391\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
ANSWER_TURN = "The answer is 391 & that's <final>.<|im_end|>"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from agentrl_lite.models import embedded_checkpoint

    return AutoTokenizer.from_pretrained(str(embedded_checkpoint()))


def make_episode(tokenizer, answer_text=ANSWER_TURN, answer="391", **metadata) -> Episode:
    """prompt | model (tool call) | tool response + next header | model (answer), with known logprobs."""
    prompt = [{"role": "user", "content": "What is 17*23?"}]
    parts = [
        (
            "prompt",
            tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)["input_ids"],
        ),
        ("model", tokenizer.encode(MODEL_TURN)),
        ("tool", tokenizer.encode(TOOL_TURN)),
        ("model", tokenizer.encode(answer_text)),
    ]
    episode = Episode(prompt=prompt, stop_reason="answer", answer=answer, metadata=metadata)
    for role, ids in parts:
        start = len(episode.token_ids)
        episode.token_ids += ids
        episode.model_mask += [int(role == "model")] * len(ids)
        # model tokens get probabilities cycling through 0.9, 0.5, 0.1 so each is distinguishable
        episode.logprobs += [
            math.log((0.9, 0.5, 0.1)[i % 3]) if role == "model" else 0.0 for i in range(len(ids))
        ]
        calls = [{"name": "calc", "arguments": {"expr": "17*23"}}] if ids == parts[1][1] else []
        episode.turns.append(
            Turn(role, start, len(episode.token_ids), tokenizer.decode(ids), tool_calls=calls)
        )
    return episode


def test_segments_cover_every_token_once_in_order(tokenizer):
    episode = make_episode(tokenizer)
    segments = episode_segments(episode, tokenizer)
    assert [s["kind"] for s in segments] == ["prompt", "model", "tool", "model"]
    assert segments[0]["start"] == 0 and segments[-1]["end"] == len(episode.token_ids)
    for before, after in zip(segments, segments[1:], strict=False):
        assert before["end"] == after["start"]
    for seg in segments:
        mask = episode.model_mask[seg["start"] : seg["end"]]
        assert set(mask) == ({1} if seg["kind"] == "model" else {0})
    assert segments[0]["end"] == episode.prompt_length
    assert "".join(s["text"] for s in segments) == tokenizer.decode(
        episode.token_ids, skip_special_tokens=False
    )
    assert segments[1]["text"] == MODEL_TURN and segments[2]["text"] == TOOL_TURN


def test_segment_mean_prob_is_mean_of_exp_logprobs(tokenizer):
    segments = episode_segments(make_episode(tokenizer), tokenizer)
    model = segments[1]
    n = model["end"] - model["start"]
    expected = sum((0.9, 0.5, 0.1)[i % 3] for i in range(n)) / n
    assert model["mean_prob"] == pytest.approx(
        expected, rel=1e-9
    )  # exp(log(p)) round trip is exact to ~1e-16
    assert segments[0]["mean_prob"] is None and segments[2]["mean_prob"] is None


def test_segments_join_exactly_when_a_character_spans_two_kinds(tokenizer):
    """A rare character is several byte-level tokens; mark half of it as model, half as tool."""
    ids = tokenizer.encode("ok 𝔸 done")
    split = next(i for i in range(1, len(ids)) if "\ufffd" in tokenizer.decode(ids[:i]))
    episode = Episode(
        prompt=[], token_ids=ids, logprobs=[0.0] * len(ids), model_mask=[1] * split + [0] * (len(ids) - split)
    )
    segments = episode_segments(episode, tokenizer)
    assert [s["kind"] for s in segments] == ["model", "tool"]
    assert "".join(s["text"] for s in segments) == "ok 𝔸 done"


def model_spans(html_text: str, kind: str) -> str:
    return "".join(re.findall(rf'<span class="arl-{kind}"[^>]*>(.*?)</span>', html_text, flags=re.S))


def test_episode_html_escapes_and_colours_by_kind(tokenizer):
    episode = make_episode(tokenizer, gold="391", reward=1.0)
    page = episode_html(episode, tokenizer)
    assert "<tool_call>" not in page and "&lt;tool_call&gt;" in page
    assert "&lt;final&gt;" in page and "&amp;" in page
    assert "&lt;tool_call&gt;" in model_spans(page, "model")
    assert "&lt;tool_response&gt;\n391" in model_spans(page, "tool")
    assert "tool_response" not in model_spans(page, "model")
    assert COLORS["model"] in page and COLORS["tool"] in page
    assert "white-space:pre-wrap" in page
    for field in ("answer</b>=391", "stop</b>=answer", "tool calls</b>=1", "gold</b>=391", "reward</b>=1.0"):
        assert field in page
    assert f"model tokens</b>={episode.num_model_tokens}" in page


def test_episode_html_folds_prompt_unless_asked(tokenizer):
    episode = make_episode(tokenizer)
    assert "<details>" in episode_html(episode, tokenizer)
    assert "<details open>" in episode_html(episode, tokenizer, show_prompt=True)


def test_per_token_html_has_one_span_per_model_token(tokenizer):
    episode = make_episode(tokenizer)
    page = episode_html(episode, tokenizer, per_token=True)
    assert page.count('class="arl-model arl-tok"') == episode.num_model_tokens
    titles = re.findall(r'class="arl-model arl-tok" title="p=([0-9.]+)"', page)
    assert titles[:3] == ["0.900", "0.500", "0.100"]
    assert "&lt;tool_call&gt;" not in model_spans(page, "model")  # the tool call is now split into tokens
    assert "&lt;tool_response&gt;" in model_spans(page, "tool")


def test_plot_curves_lines_and_legend():
    ax = plot_curves({"reward": [0, 1, 0, 1, 1], "accuracy": [0.1, 0.2, 0.3, 0.4, 0.5]}, smooth=2, ylabel="r")
    assert len(ax.get_lines()) == 4  # raw + smoothed per curve
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["reward", "accuracy"]
    assert list(ax.get_lines()[1].get_ydata()) == [0, 0.5, 0.5, 0.5, 1]  # trailing mean over 2 steps
    plt.close(ax.figure)
    ax = plot_curves({"loss": [3, 2, 1]})
    assert len(ax.get_lines()) == 1 and list(ax.get_lines()[0].get_ydata()) == [3, 2, 1]
    plt.close(ax.figure)


def test_plot_token_probs_highlights_low_probability_tokens():
    ax = plot_token_probs(["The", " answer", "\n", "$"], [0.9, 0.2, 0.7, 0.05])
    bars = ax.patches
    assert len(bars) == 4 and [b.get_height() for b in bars] == [0.9, 0.2, 0.7, 0.05]
    assert (
        bars[0].get_facecolor()
        == bars[2].get_facecolor()
        != bars[1].get_facecolor()
        == bars[3].get_facecolor()
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == ["The", "·answer", "\\n", r"\$"]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="one per token"):
        plot_token_probs(["a"], [0.1, 0.2])


def test_plot_bars_annotates_values():
    ax = plot_bars({"no tool": 0.12, "with tool": 0.58, "after SFT": 0.71}, ylim=(0, 1))
    assert [b.get_height() for b in ax.patches] == [0.12, 0.58, 0.71]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["no tool", "with tool", "after SFT"]
    assert [t.get_text() for t in ax.texts] == ["0.12", "0.58", "0.71"]
    assert ax.get_ylim() == (0, 1)
    plt.close(ax.figure)


def test_plot_seed_study_draws_each_seed_and_the_mean_with_its_interval():
    def ci(xs, lo, hi):
        return {"per_seed": xs, "estimate": sum(xs) / len(xs), "low": lo, "high": hi}

    summary = {"seeds": [0, 1, 2], "stages": {"SFT": {"accuracy": ci([0.4, 0.5, 0.0], -0.3, 1.0)},
                                              "RL": {"accuracy": ci([0.6, 0.7, 0.7], 0.5, 0.8)}}}
    ax = plot_seed_study(summary)
    seed_lines = [line for line in ax.get_lines() if line.get_label().startswith("seed")]
    assert [line.get_label() for line in seed_lines] == ["seed 0", "seed 1", "seed 2"]
    assert [list(line.get_ydata()) for line in seed_lines] == [[0.4, 0.6], [0.5, 0.7], [0.0, 0.7]]
    bars = ax.containers  # one errorbar per stage: the mean and its interval over seeds
    assert len(bars) == 2
    segment = bars[1].lines[2][0].get_segments()[0]
    assert segment[0][1] == pytest.approx(0.5) and segment[1][1] == pytest.approx(0.8)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["SFT", "RL"]
    summary["scalars"] = {"calls.SFT": ci([1.0, 2.0, 0.0], -1.0, 3.0), "calls.RL": ci([2.0, 2.0, 2.0], 2.0, 2.0)}
    ax = plot_seed_study(summary, scalar="calls.{stage}", ax=plt.subplots()[1], ylim=None)
    seed_lines = [line for line in ax.get_lines() if line.get_label().startswith("seed")]
    assert [list(line.get_ydata()) for line in seed_lines] == [[1.0, 2.0], [2.0, 2.0], [0.0, 2.0]]
    plt.close("all")


def test_episode_label_summarises():
    episode = Episode(prompt=[], answer="391", metadata={"gold": "391"})
    assert episode_label(3, episode) == "#3 answer=391 ✓ tools=0"
    assert (
        episode_label(0, Episode(prompt=[], answer="7", metadata={"reward": 0.0})) == "#0 answer=7 ✗ tools=0"
    )
    assert episode_label(1, Episode(prompt=[], answer=None)) == "#1 answer=None tools=0"
    scored = Episode(prompt=[], answer="391.0", metadata={"answer": "391", "score": {"correct": 1.0}})
    assert episode_label(2, scored) == "#2 answer=391.0 ✓ tools=0"  # the env's verdict wins over strings


def test_trajectory_viewer_updates_html(tokenizer):
    episodes = [
        make_episode(tokenizer, gold="391"),
        make_episode(tokenizer, "It is 7.<|im_end|>", "7", gold="391"),
    ]
    viewer = trajectory_viewer(episodes, tokenizer)
    assert [label for label, _ in viewer.dropdown.options] == [
        "#0 answer=391 ✓ tools=1",
        "#1 answer=7 ✗ tools=1",
    ]
    first = viewer.html.value
    assert first == episode_html(episodes[0], tokenizer)
    viewer.dropdown.value = 1
    assert viewer.html.value == episode_html(episodes[1], tokenizer) != first
    viewer.per_token.value = True
    assert viewer.html.value == episode_html(episodes[1], tokenizer, per_token=True)
    bundle = viewer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and bundle["text/html"] == viewer.html.value
    assert viewer.html in viewer.widget.children


def test_trajectory_viewer_falls_back_to_html_without_widgets(tokenizer, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # makes `import ipywidgets` raise ImportError
    episodes = [make_episode(tokenizer), make_episode(tokenizer, "It is 7.<|im_end|>", "7")]
    viewer = trajectory_viewer(episodes, tokenizer)
    assert viewer.widget is None
    assert viewer._repr_mimebundle_() == {"text/html": episode_html(episodes[0], tokenizer)}
    with pytest.raises(ValueError, match="at least one episode"):
        trajectory_viewer([], tokenizer)


def test_markdown_table_rounds_floats_and_keeps_cells_on_one_line():
    from agentrl_lite.viz import markdown_table

    table = markdown_table([{"run": "a|b", "acc": 0.71875, "n": 32}, {"run": "two\nlines", "acc": 1.0, "n": 4}], digits=2)
    assert table.splitlines() == ["| run | acc | n |", "|---|---|---|", "| a\\|b | 0.72 | 32 |", "| two⏎lines | 1.00 | 4 |"]
