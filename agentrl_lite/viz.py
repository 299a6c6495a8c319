"""Visualisation (reading any stage's output): pictures of training and of single episodes: learning curves, token probabilities, trajectories.

Two kinds of looking, both needed to trust an RL run:

- curves (`plot_curves`, `plot_bars`, `plot_token_probs`) say *whether* the numbers move, and
  `plot_seed_study` whether they move the same way in every seed;
- tables (`markdown_table`, `show_table`) put the numbers of several runs side by side;
- trajectories (`episode_html`, `show_episode`, `trajectory_viewer`) say *why*: what the policy wrote
  (green), what the tools answered (orange), and how sure the policy was of each token it sampled.

matplotlib is imported when a plot is drawn and ipywidgets only inside the viewer, so this module
imports anywhere.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from agentrl_lite.episode import Episode

COLORS = {"prompt": "#e6e6e6", "model": "#c8f0c8", "tool": "#ffe0b3"}
"""background per segment kind: prompt grey, policy-generated green, tool/environment orange"""


def _axes(ax: Any) -> Any:
    import matplotlib.pyplot as plt

    return ax if ax is not None else plt.subplots(figsize=(7, 3.5))[1]


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last `window` points (fewer at the start), so the curve keeps its length."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_curves(
    curves: dict[str, Sequence[float]],
    *,
    xlabel: str = "step",
    ylabel: str = "",
    title: str = "",
    ax: Any = None,
    smooth: int = 1,
) -> Any:
    """Several learning curves on one axes. With `smooth > 1`, a moving average over `smooth` steps is
    drawn over the raw curve (faint, same colour): RL rewards are noisy, the trend is what matters."""
    ax = _axes(ax)
    for name, values in curves.items():
        values = [float(v) for v in values]
        if smooth > 1:
            (raw,) = ax.plot(values, alpha=0.25, label=f"_{name} (raw)")
            ax.plot(_moving_average(values, smooth), color=raw.get_color(), label=name)
        else:
            ax.plot(values, label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend()
    return ax


def _tick_label(token: str) -> str:
    """Make whitespace visible and keep matplotlib from reading `$` as maths."""
    return token.replace("\n", "\\n").replace(" ", "·").replace("$", r"\$") or "∅"


def plot_token_probs(
    tokens: list[str], probs: Sequence[float], *, ax: Any = None, title: str = "", low: float = 0.5
) -> Any:
    """What the policy thought of each token it sampled: π(token | prefix) as bars; tokens with
    probability below `low` (the sampler's "surprising" choices) are drawn in red."""
    if len(tokens) != len(probs):
        raise ValueError(f"{len(tokens)} tokens but {len(probs)} probabilities: pass one per token")
    ax = _axes(ax)
    colors = ["tab:red" if p < low else "tab:green" for p in probs]
    ax.bar(range(len(tokens)), probs, color=colors)
    ax.set_xticks(range(len(tokens)), [_tick_label(t) for t in tokens], rotation=70, fontsize=8)
    ax.axhline(low, color="grey", lw=0.8, ls="--")
    ax.set(ylim=(0, 1.05), ylabel="π(token | prefix)", title=title)
    return ax


def plot_bars(
    values: dict[str, float], *, ylabel: str = "", title: str = "", ax: Any = None, ylim: Any = None
) -> Any:
    """Labelled bars with their values written on top (e.g. accuracy without tool / with tool / after SFT)."""
    ax = _axes(ax)
    bars = ax.bar(list(values), list(values.values()), color=[f"C{i}" for i in range(len(values))])
    ax.bar_label(bars, fmt="%.2f")
    ax.set(ylabel=ylabel, title=title)
    if ylim is not None:
        ax.set_ylim(*ylim)
    return ax


def plot_seed_study(summary: dict[str, Any], *, measure: str = "accuracy", scalar: str | None = None,
                    ylabel: str = "held-out accuracy", title: str = "", ax: Any = None, ylim: Any = (-0.05, 1.05)) -> Any:
    """One column per stage of a multi-seed results file (`reproduce`'s `metrics`): each seed's score as a
    point, joined across stages so a seed's own path shows, and the mean with its 95 % t interval over seeds
    as a black bar. Where the seeds' lines cross, the ranking of the stages is one seed's luck.
    scalar: instead of a stage's `measure`, a per-seed scalar of the file, its path with `{stage}` in place of the
    stage's name (e.g. "heldout.{stage}.calls_per_episode")."""
    ax = _axes(ax)
    stages = list(summary["stages"])
    value = (lambda st: summary["stages"][st][measure]) if scalar is None else \
        (lambda st: summary["scalars"][scalar.format(stage=st)])
    for s, seed in enumerate(summary["seeds"]):
        ax.plot(range(len(stages)), [value(st)["per_seed"][s] for st in stages], "o-", alpha=0.6, label=f"seed {seed}")
    for i, st in enumerate(stages):
        m = value(st)
        ax.errorbar(i + 0.12, m["estimate"], yerr=[[m["estimate"] - m["low"]], [m["high"] - m["estimate"]]],
                    fmt="s", color="black", capsize=4, label="mean, 95 % t interval" if i == 0 else None)
    ax.set_xticks(range(len(stages)), stages, rotation=15, ha="right")
    ax.set(ylabel=ylabel, title=title, ylim=ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def episode_segments(episode: Episode, tokenizer: Any) -> list[dict[str, Any]]:
    """Split `episode.token_ids` into maximal runs of one kind, in order, covering every token once.

    kind: "prompt" (tokens of turns[0]), "model" (model_mask 1), "tool" (everything else after the prompt).
    Each segment: {"kind", "start", "end", "text", "mean_prob"}, mean_prob = mean of exp(logprobs) on
    model segments (how confident the policy was), None elsewhere. The texts are cut from one decode of
    the whole episode, so they concatenate to exactly `tokenizer.decode(token_ids)`.
    """
    ids = episode.token_ids
    kinds = [
        "prompt" if i < episode.prompt_length else "model" if episode.model_mask[i] else "tool"
        for i in range(len(ids))
    ]
    segments: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        if segments and segments[-1]["kind"] == kind:
            segments[-1]["end"] = i + 1
        else:
            segments.append({"kind": kind, "start": i, "end": i + 1})
    full = tokenizer.decode(ids, skip_special_tokens=False)
    cut = 0
    for seg in segments:
        # Decoding a segment on its own can differ from the joint decode (a character split over two
        # tokens); the length of the decoded prefix tells where this segment ends in the full text.
        end = (
            len(full)
            if seg is segments[-1]
            else len(tokenizer.decode(ids[: seg["end"]], skip_special_tokens=False))
        )
        seg["text"], cut = full[cut:end], end
        probs = [math.exp(lp) for lp in episode.logprobs[seg["start"] : seg["end"]]]
        seg["mean_prob"] = sum(probs) / len(probs) if seg["kind"] == "model" and probs else None
    return segments


def _span(text: str, kind: str, title: str = "") -> str:
    tip = f' title="{html.escape(title)}"' if title else ""
    return f'<span class="arl-{kind}" style="background:{COLORS[kind]}"{tip}>{html.escape(text)}</span>'


def _header(episode: Episode) -> str:
    fields = {
        "stop": episode.stop_reason,
        "answer": episode.answer,
        "tool calls": episode.num_tool_calls,
        "model tokens": episode.num_model_tokens,
        **episode.metadata,
    }
    return " · ".join(f"<b>{html.escape(str(k))}</b>={html.escape(str(v))}" for k, v in fields.items())


def episode_html(
    episode: Episode, tokenizer: Any, *, show_prompt: bool = False, per_token: bool = False
) -> str:
    """One episode as HTML, turn by turn: policy tokens green, tool/environment tokens orange, prompt grey
    (folded unless `show_prompt`). With `per_token`, every model token is its own span whose green
    deepens with its probability; hover for the exact value."""
    legend = " ".join(_span(k, k) for k in ("prompt", "model", "tool"))
    body = []
    for seg in episode_segments(episode, tokenizer):
        if seg["kind"] == "prompt":
            opened = " open" if show_prompt else ""
            n = seg["end"] - seg["start"]
            body.append(
                f"<details{opened}><summary>prompt ({n} tokens)</summary>{_span(seg['text'], 'prompt')}</details>"
            )
        elif seg["kind"] == "model" and per_token:
            for i in range(seg["start"], seg["end"]):
                p = math.exp(episode.logprobs[i])
                text = html.escape(tokenizer.decode([episode.token_ids[i]], skip_special_tokens=False))
                body.append(
                    f'<span class="arl-model arl-tok" title="p={p:.3f}" '
                    f'style="background:rgba(40,170,40,{0.1 + 0.6 * p:.2f})">{text}</span>'
                )
        else:
            tip = f"mean p={seg['mean_prob']:.3f}" if seg["mean_prob"] is not None else ""
            body.append(_span(seg["text"], seg["kind"], tip))
    return (
        f'<div class="arl-episode"><div style="font-size:90%;margin-bottom:4px">{_header(episode)}'
        f" &nbsp; {legend}</div>"
        f'<div style="white-space:pre-wrap;font-family:monospace;line-height:1.5">{"".join(body)}</div></div>'
    )


def markdown_table(rows: Sequence[dict[str, Any]], digits: int = 3) -> str:
    """A list of dicts (one per row, the first row's keys as columns) as a Markdown table: floats rounded to
    `digits`, newlines shown as ⏎ and pipes escaped so a cell never breaks the table."""
    columns = list(rows[0])

    def cell(value: Any) -> str:
        return f"{value:.{digits}f}" if isinstance(value, float) else str(value).replace("\n", "⏎").replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows])


def show_table(rows: Sequence[dict[str, Any]], digits: int = 3) -> None:
    """Display `markdown_table(rows, digits)` in the notebook."""
    from IPython.display import Markdown, display

    display(Markdown(markdown_table(rows, digits)))


def show_episode(episode: Episode, tokenizer: Any, **kw: Any) -> None:
    """Display `episode_html(episode, tokenizer, **kw)` in the notebook."""
    from IPython.display import HTML, display

    display(HTML(episode_html(episode, tokenizer, **kw)))


def _verdict(episode: Episode) -> str:
    """✓/✗ from metadata: `correct` (or `score["correct"]`, as `eval.evaluate` stores it), else
    `reward` > 0, else the answer against a gold `answer`/`gold` as strings; "" when none is known."""
    meta = episode.metadata
    score = meta.get("score") if isinstance(meta.get("score"), dict) else {}
    if "correct" in meta or "correct" in score:
        ok = bool(meta.get("correct", score.get("correct")))
    elif "reward" in meta:
        ok = float(meta["reward"]) > 0
    elif "gold" in meta or "answer" in meta:
        ok = str(episode.answer).strip() == str(meta.get("gold", meta.get("answer"))).strip()
    else:
        return ""
    return " ✓" if ok else " ✗"


def episode_label(index: int, episode: Episode) -> str:
    """A one-line summary for a list of episodes, e.g. `#3 answer=391 ✓ tools=1`."""
    return f"#{index} answer={episode.answer}{_verdict(episode)} tools={episode.num_tool_calls}"


class TrajectoryViewer:
    """Browse episodes in a notebook: a dropdown over episodes, a per-token-probabilities checkbox,
    and the selected episode's HTML. `.widget` is the ipywidgets box; where widgets cannot render
    (no ipywidgets, a static HTML export) the current episode is shown as plain HTML instead."""

    def __init__(self, episodes: Sequence[Episode], tokenizer: Any, *, show_prompt: bool = False):
        if not episodes:
            raise ValueError("TrajectoryViewer needs at least one episode; got an empty list")
        self.episodes, self.tokenizer, self.show_prompt = list(episodes), tokenizer, show_prompt
        self.widget = None
        try:
            import ipywidgets as w
        except ImportError:
            return
        options = [(episode_label(i, e), i) for i, e in enumerate(self.episodes)]
        self.dropdown = w.Dropdown(options=options, value=0, description="episode")
        self.per_token = w.Checkbox(value=False, description="per-token probabilities")
        self.html = w.HTML(value=episode_html(self.episodes[0], tokenizer, show_prompt=show_prompt))
        for control in (self.dropdown, self.per_token):
            control.observe(lambda _change: setattr(self.html, "value", self.current_html()), names="value")
        self.widget = w.VBox([w.HBox([self.dropdown, self.per_token]), self.html])

    def current_html(self) -> str:
        """HTML of the selected episode (the first one when there are no widgets)."""
        index = self.dropdown.value if self.widget is not None else 0
        per_token = self.per_token.value if self.widget is not None else False
        return episode_html(
            self.episodes[index], self.tokenizer, show_prompt=self.show_prompt, per_token=per_token
        )

    def _repr_mimebundle_(self, **kw: Any) -> dict[str, Any]:
        bundle = self.widget._repr_mimebundle_(**kw) if self.widget is not None else {}
        return {**bundle, "text/html": self.current_html()}


def trajectory_viewer(episodes: Sequence[Episode], tokenizer: Any, **kw: Any) -> TrajectoryViewer:
    """`TrajectoryViewer(episodes, tokenizer)`: put it last in a cell to browse the episodes."""
    return TrajectoryViewer(episodes, tokenizer, **kw)
