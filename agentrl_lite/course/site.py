"""The course website (course tooling): `make site` builds `build/site/` offline with Sphinx, myst-nb and furo.

What goes in (`stage` copies it into `build/site-src/`, which Sphinx reads; neither folder is committed):
- the README as the home page, with the table of contents;
- a page per lesson: the executed copy under `docs/executed/` (the outputs of the cpu-profile run whose results
  file is committed, kept by `keep_executed`) with a banner naming that run, or, for a lesson without one yet, the
  stored notebook with a banner saying so (never smoke outputs);
- the results pages (`docs/results.md`, the scale guide), figures drawn here from the results files (each lesson's
  primary claim with its intervals; runtime per lesson against its budget), the design pages, the instructor's
  guide and the setup page, and the library's API reference (autodoc, from the docstrings).

Links between these files are rewritten to the staged pages; a link to a repository file that has no page (a
results file, a module's source) becomes plain text, so every link on the site resolves. The build must not
need the network: the theme, the notebook reader and the formulas' MathML (latex2mathml) come from packages,
and widget outputs (tqdm bars) are shown as their text.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from agentrl_lite.course.executed import EXECUTED, keep_executed
from agentrl_lite.paths import course_root

API_MODULES = {
    "Core": ["agentrl_lite.chat", "agentrl_lite.tools", "agentrl_lite.env", "agentrl_lite.episode",
             "agentrl_lite.rollout", "agentrl_lite.engine", "agentrl_lite.rewards", "agentrl_lite.advantages",
             "agentrl_lite.loss", "agentrl_lite.logprobs", "agentrl_lite.grpo", "agentrl_lite.sft",
             "agentrl_lite.evaluate", "agentrl_lite.models", "agentrl_lite.sandbox", "agentrl_lite.stats",
             "agentrl_lite.trl_bridge", "agentrl_lite.viz"],
    "Tasks": ["agentrl_lite.tasks.arithmetic", "agentrl_lite.tasks.word_problems", "agentrl_lite.tasks.function_calls",
              "agentrl_lite.tasks.search", "agentrl_lite.tasks.kernels", "agentrl_lite.tasks.memory",
              "agentrl_lite.tasks.sql"],
    "Course tooling": ["agentrl_lite.course.reproduce", "agentrl_lite.course.results", "agentrl_lite.course.train"],
}
"""the modules the API reference documents, by section"""
LINK = re.compile(r"(!?)\[([^\]\n]+)\]\(([^)\s]+)\)")


def lessons(root: Path | None = None) -> list[Path]:
    """The lesson notebooks, in order."""
    return sorted((root or course_root()).glob("notebooks/[0-9][0-9]_*.ipynb"))


# ------------------------------------------------------------------------------------------------- staging
def _page_map(root: Path) -> dict[Path, str]:
    """repository file → its staged page (relative to the site's source folder)."""
    pages = {root / "README.md": "index.md"}
    pages |= {nb: f"lessons/{nb.name}" for nb in lessons(root)}
    pages |= {md: str(md.relative_to(root / "docs")) for md in (root / "docs").rglob("*.md")
              if "executed" not in md.parts}
    return pages


def rewrite_links(text: str, source: Path, staged: str, pages: dict[Path, str]) -> str:
    """Markdown `text` of repository file `source`, staged as `staged`: links to other staged files point at their
    pages, links to repository files without a page become their text, web links stay."""
    def replace(match: re.Match) -> str:
        bang, label, target = match.groups()
        if re.match(r"^[a-z]+:|^#", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve()
        if resolved in pages:
            rel = os.path.relpath(pages[resolved], os.path.dirname(staged) or ".")
            return f"{bang}[{label}]({rel}{'#' + anchor if anchor else ''})"
        return label if not bang else match.group(0)
    return LINK.sub(replace, text)


def cells_changed_since_run(executed: Any, lesson: Any) -> int:
    """How many cells of the stored lesson (an nbformat notebook) the executed run (another) does not hold word for
    word: 0 when the page's outputs come from the text and code the lesson has now. The parameters cell papermill
    injected into the run is not part of the lesson."""
    ran = {(c.cell_type, c.source) for c in executed.cells if "injected-parameters" not in c.metadata.get("tags", [])}
    return sum((c.cell_type, c.source) not in ran for c in lesson.cells)


def _banner(run: dict[str, Any] | None, name: str, changed: int = 0) -> str:
    if run is None:
        return (f"> **No outputs on this page yet.** Lesson `{name}` has no committed cpu-profile run to show; run it "
                "with `make course PROFILE=cpu LESSON=" + name[:2] + "` to see its plots and numbers.")
    minutes = f", {run['notebook_seconds'] / 60:.0f} min" if run.get("notebook_seconds") else ""
    since = (f" The lesson has changed since that run ({changed} cell{'s' if changed != 1 else ''} of "
             f"`notebooks/{name}.ipynb` differ): the text and code below are the run's, not the current lesson's."
             if changed else "")
    return (f"> **Outputs from a {run['profile']}-profile run**: `{run['command']}` on {run['device']}, "
            f"seed {run['seed']}, {run['date'][:10]}{minutes}. Its numbers are those of "
            f"`results/lessons/{run['results']}.json`; your run may differ in the digits (see the setup page).{since}")


def _stage_notebook(source: Path, executed: Path, out: Path, pages: dict[Path, str]) -> None:
    import nbformat

    nb = nbformat.read(str(executed if executed.is_file() else source), as_version=4)
    run = nb.metadata.get("agentrl_run") if executed.is_file() else None
    changed = cells_changed_since_run(nb, nbformat.read(str(source), as_version=4)) if run else 0
    staged = pages[source.resolve()]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = rewrite_links(cell.source, source, staged, pages)
    title_end = nb.cells[0].source.find("\n") if nb.cells and nb.cells[0].cell_type == "markdown" else -1
    banner = _banner(run, source.stem, changed)
    if title_end > 0:  # under the lesson's title, which stays the page's heading
        nb.cells[0].source = nb.cells[0].source[:title_end] + "\n\n" + banner + "\n" + nb.cells[0].source[title_end:]
    else:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(banner))
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(out))


SYLLABUS = [(1, "00"), (2, "01"), (3, "02"), (4, "03"), (5, "04"), (6, "05"), (7, "06"), (8, "07"),
            (9, "review: a decision lab on one of lessons 05-07 (the instructor's guide)"), (10, "08"), (11, "09"),
            (12, "10"), (13, "11"), (14, "12")]
"""week → lesson number, or what the week holds instead"""


def syllabus_table(root: Path, staged: str = "instructor.md") -> str:
    """The instructor's guide's week-by-week table: each lesson's page, its measured cpu runtime and the arXiv
    ids of its Reading cell (both read from the repository when the site is built)."""
    import nbformat

    runtime = {}
    if (file := root / "results" / "bench" / "course_cpu.json").is_file():
        runtime = {Path(name).stem: row["seconds"] for name, row in
                   json.loads(file.read_text())["metrics"]["notebooks"].items()}
    by_number = {nb.name[:2]: nb for nb in lessons(root)}
    rows = ["| week | lesson | compute, cpu profile | reading (arXiv) |", "|---|---|---|---|"]
    for week, what in SYLLABUS:
        nb = by_number.get(what)
        if nb is None:
            rows.append(f"| {week} | {what} | | |")
            continue
        cells = nbformat.read(str(nb), as_version=4).cells
        title = cells[0].source.split("\n")[0].lstrip("# ").strip()
        reading = [c.source for c in cells if c.cell_type == "markdown" and c.source.lstrip().startswith("## Reading")]
        ids = sorted(set(re.findall(r"\b(\d{4}\.\d{4,5})\b", "\n".join(reading))))
        minutes = f"{runtime[nb.stem] / 60:.0f} min" if nb.stem in runtime else "not measured"
        link = os.path.relpath(f"lessons/{nb.name}", os.path.dirname(staged) or ".")
        rows.append(f"| {week} | [{title}]({link}) | {minutes} | {', '.join(ids)} |")
    return "\n".join(rows)


def _api_page() -> str:
    lines = ["# API reference", "", "Generated from the docstrings of `agentrl_lite`.", ""]
    for section, modules in API_MODULES.items():
        lines += [f"## {section}", ""]
        for module in modules:
            lines += [f"### `{module}`", "", "```{eval-rst}", f".. automodule:: {module}", "   :members:", "```", ""]
    return "\n".join(lines)


TOC = """

```{{toctree}}
:hidden:
:caption: Lessons
:maxdepth: 1

{lessons}
```

```{{toctree}}
:hidden:
:caption: Results
:maxdepth: 1

figures
results
```

```{{toctree}}
:hidden:
:caption: Teaching and setup
:maxdepth: 1

{teaching}
```

```{{toctree}}
:hidden:
:caption: Beyond the course
:maxdepth: 1

scale
{design}
api
```
"""


def stage(src: Path, root: Path | None = None) -> Path:
    """Write the site's Sphinx source folder `src` (wiped first) from the repository at `root`."""
    root = (root or course_root()).resolve()
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    pages = _page_map(root)
    for source, staged in pages.items():
        out = src / staged
        out.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".ipynb":
            _stage_notebook(source, root / EXECUTED / source.name, out, pages)
        else:
            out.write_text(rewrite_links(source.read_text(), source, staged, pages))
    teaching = [p for p in ("instructor.md", "setup.md") if (src / p).exists()]
    if (guide := src / "instructor.md").exists():
        guide.write_text(guide.read_text().replace("<!-- syllabus -->", syllabus_table(root)))
    design = sorted(str(Path(p).with_suffix("")) for p in pages.values() if p.startswith("design/"))
    index = src / "index.md"
    index.write_text(index.read_text() + TOC.format(
        lessons="\n".join(f"lessons/{nb.stem}" for nb in lessons(root)),
        teaching="\n".join(str(Path(p).with_suffix("")) for p in teaching),
        design="\n".join(design)))
    (src / "api.md").write_text(_api_page())
    static = src / "_static"
    shutil.copytree(root / "docs" / "_static", static)  # the favicon
    (src / "figures.md").write_text(figures_page(static / "figures", root))
    shutil.copy(root / "docs" / "conf.py", src / "conf.py")
    return src


# ------------------------------------------------------------------------------------------------- figures
def figures_page(folder: Path, root: Path) -> str:
    """Draw the results figures into `folder` and return the page that shows them."""
    import matplotlib

    matplotlib.use("Agg")
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["# Results at a glance", "",
             "Drawn from the committed results files when the site is built; `docs/results.md` (the next page) "
             "holds the tables behind them.", ""]
    if effects := _effects_figure(folder / "primary_claims.png", root):
        lines += ["## Each lesson's primary claim", "", effects, "", "![Each lesson's primary claim: the effect with "
                  "its t interval over seeds and its bootstrap interval over seeds and items](_static/figures/"
                  "primary_claims.png)", ""]
    if runtime := _runtime_figure(folder / "runtime.png", root):
        lines += ["## Runtime per lesson", "", runtime, "",
                  "![Each lesson's cpu-profile runtime against its budget](_static/figures/runtime.png)", ""]
    return "\n".join(lines)


def _effects_figure(path: Path, root: Path) -> str | None:
    import matplotlib.pyplot as plt

    from agentrl_lite.course.reproduce import LESSONS, primary_claim

    rows = []
    for lesson, spec in sorted(LESSONS.items()):
        file = root / "results" / "lessons" / f"{spec.results}_seeds.json"
        if not file.is_file():
            continue
        summary = json.loads(file.read_text())["metrics"]
        claim = primary_claim(summary) if summary.get("rule") else None
        if claim is None:
            continue
        rows.append((lesson, claim))
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.8))
    for y, (_, claim) in enumerate(rows):
        t, boot = claim["mean_over_seeds"], claim["bootstrap_over_seeds_and_items"]
        ax.plot([t["low"], t["high"]], [y + 0.12] * 2, color="tab:blue", lw=3, label="t interval over seeds" if y == 0 else None)
        ax.plot([boot["low"], boot["high"]], [y - 0.12] * 2, color="tab:orange", lw=3,
                label="bootstrap over seeds and items" if y == 0 else None)
        ax.plot([t["estimate"]], [y], "ko")
    ax.axvline(0, color="grey", lw=1)
    ax.set_yticks(range(len(rows)), [f"{lesson}: {c['after']} vs {c['before']} ({c['verdict']})" for lesson, c in rows])
    ax.set_xlabel("difference (after − before), held-out measure")
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, fontsize=8)  # below the axis, off the rows
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return (f"{len(rows)} lessons have a primary-claim study under the current rule (the others are being rerun). "
            "A claim is shown when both intervals exclude zero on the expected side at the lesson's level.")


def _runtime_figure(path: Path, root: Path) -> str | None:
    import matplotlib.pyplot as plt

    file = root / "results" / "bench" / "course_cpu.json"
    if not file.is_file():
        return None
    record = json.loads(file.read_text())
    notebooks, budget = record["metrics"]["notebooks"], record["metrics"]["budget_seconds_per_notebook"]
    names = sorted(notebooks)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(range(len(names)), [notebooks[n]["seconds"] / 60 for n in names], color="tab:blue", label=record["device"])
    slower = [notebooks[n].get("other_machine", {}).get("seconds") for n in names]
    if any(slower):
        ax.scatter(range(len(names)), [s / 60 if s else float("nan") for s in slower], color="tab:red", zorder=3,
                   label="the other kind of CPU (bf16 vs fp32), where measured")
    ax.axhline(budget / 60, color="grey", ls="--", label=f"budget {budget / 60:.0f} min")
    ax.set_xticks(range(len(names)), [n[:2] for n in names])
    ax.set_xlabel("lesson")
    ax.set_ylabel("minutes, cpu profile")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"From `results/bench/course_cpu.json` ({record['date'][:10]}); each bar is one lesson's latest cpu run, named in that file."


# ------------------------------------------------------------------------------------------------- browser
def pages(site: Path) -> list[Path]:
    """The site's content pages (not Sphinx's generated index, search and module-source pages)."""
    skip = {"genindex.html", "search.html", "py-modindex.html"}
    return sorted(p for p in site.rglob("*.html") if p.name not in skip
                  and not {"_modules", "_static", "_sources"} & set(p.relative_to(site).parts))


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        for key in ("href", "src"):
            if tag in ("a", "img", "link", "script") and values.get(key):
                self.links.append(values[key])


def broken_links(site: Path) -> list[str]:
    """Every internal link, image and script of every content page that does not resolve: "page -> target"."""
    parsed: dict[Path, _Links] = {}

    def parse(path: Path) -> _Links:
        if path not in parsed:
            parsed[path] = _Links()
            parsed[path].feed(path.read_text(errors="replace"))
        return parsed[path]

    broken = []
    for page in pages(site):
        for link in parse(page).links:
            if re.match(r"^[a-z]+:", link) or link.startswith("//"):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path.split("?")[0]).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or (anchor and target.suffix == ".html" and anchor not in parse(target).ids):
                broken.append(f"{page.relative_to(site)} -> {link}")
    return broken


class Browser:
    """Headless Chromium (Debian's `chromium` and `chromium-driver`) on a local HTTP server over the built site:
    what a reader's browser does with each page, console errors included."""

    def __init__(self, site: Path) -> None:
        import functools
        import http.server
        import threading

        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        handler = functools.partial(_QuietHandler, directory=str(site))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}/"
        # a profile folder of its own, in a temporary folder that exists (a test run may have pointed TMPDIR at a
        # folder pytest has since wiped: Chromium then cannot start)
        tmp = os.environ.get("TMPDIR")
        tmp = tmp if tmp and os.path.isdir(tmp) else "/tmp"
        self.profile = tempfile.mkdtemp(prefix="agentrl-chromium-", dir=tmp)
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "chromium"
        options.add_argument(f"--user-data-dir={self.profile}")
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--disable-extensions", "--no-first-run"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(shutil.which("chromedriver") or "chromedriver", env={**os.environ, "TMPDIR": tmp})
        self.driver = webdriver.Chrome(options=options, service=service)
        self.driver.set_page_load_timeout(60)

    def open(self, relative: str) -> list[str]:
        """Load a page; returns its console errors (severe messages)."""
        self.driver.get(self.root + relative)
        self.driver.execute_script("return document.readyState")
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def shown_images(self) -> int:
        """Images on the current page that loaded (a broken image has no natural width)."""
        return self.driver.execute_script(
            "return Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length")

    def search(self, word: str, timeout: float = 30.0) -> list[str]:
        """The page addresses the site's search box lists for `word`."""
        import time

        from selenium.webdriver.common.by import By

        self.open(f"search.html?q={word}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.driver.find_elements(By.CSS_SELECTOR, "ul.search li a")
            if found or "did not match" in self.driver.page_source:
                return [a.get_attribute("href") for a in found]
            time.sleep(0.2)
        return []

    def screenshot(self, relative: str, out: Path) -> Path:
        self.open(relative)
        out.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(out))
        return out

    def close(self) -> None:
        self.driver.quit()
        self.server.shutdown()
        shutil.rmtree(self.profile, ignore_errors=True)


class _QuietHandler(__import__("http.server").server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


SCREENSHOTS = {"home.png": "index.html", "lesson_10.png": "lessons/10_kernel_generation_rl.html",
               "results.png": "figures.html"}
"""the three screenshots kept under docs/screenshots/ (`agentrl-lite site --screenshots`)"""


def screenshots(site: Path, out: Path) -> list[Path]:
    browser = Browser(site)
    try:
        return [browser.screenshot(page, out / name) for name, page in SCREENSHOTS.items()]
    finally:
        browser.close()


# --------------------------------------------------------------------------------------------------- build
def build(out: Path | None = None, root: Path | None = None, quiet: bool = True) -> Path:
    """Stage and build the site into `out` (default build/site/); returns the path of its index.html. Fails on a
    Sphinx error; warnings are printed and also written to `out`/../sphinx-warnings.txt (empty when there are
    none: a test keeps it so)."""
    from sphinx.cmd.build import build_main

    root = (root or course_root()).resolve()
    out = out or root / "build" / "site"
    src = stage(root / "build" / "site-src", root)
    os.environ["AGENTRL_SITE_REPO"] = str(root)
    warnings = out.parent / "sphinx-warnings.txt"
    status = build_main(["-b", "html", "-j", "1", "-w", str(warnings), *(["-q"] if quiet else []), str(src), str(out)])
    if status:
        raise RuntimeError(f"sphinx-build failed ({status}); source staged in {src}")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="output folder (default build/site)")
    parser.add_argument("--keep", nargs=2, metavar=("EXECUTED_NOTEBOOK", "RESULTS"), default=None,
                        help="store an executed cpu lesson for its page instead of building")
    parser.add_argument("--screenshots", action="store_true",
                        help="after building, store the three screenshots under docs/screenshots/")
    args = parser.parse_args(argv)
    if args.keep:
        print("kept", keep_executed(args.keep[0], args.keep[1]))
        return 0
    index = build(Path(args.out) if args.out else None)
    print("built", index)
    if args.screenshots:
        for path in screenshots(index.parent, course_root() / "docs" / "screenshots"):
            print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
