"""The course site: built offline from the repository, every link resolves, and in a real browser (Debian's
headless Chromium) every page loads without a console error, lesson pages with a committed run show their figures,
formulas are typeset and the search box finds a lesson by a word of its text."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from agentrl_lite.course.executed import EXECUTED, executed_run
from agentrl_lite.course.results import read_results
from agentrl_lite.course.site import (
    Browser,
    broken_links,
    build,
    cells_changed_since_run,
    lessons,
    pages,
    rewrite_links,
)
from agentrl_lite.paths import course_root

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")  # Sphinx 11
ROOT = course_root()
NO_BROWSER = shutil.which("chromium") is None or shutil.which("chromedriver") is None


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("site") / "html").parent


@pytest.fixture(scope="module")
def browser(site):
    if NO_BROWSER:
        pytest.skip("Chromium and chromedriver are not installed (.ci/run installs Debian's chromium, chromium-driver)")
    b = Browser(site)
    yield b
    b.close()


def test_a_kept_run_says_how_many_cells_of_the_lesson_changed_since():
    import nbformat

    lesson = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 99 · x"), nbformat.v4.new_code_cell("a = 1"),
                                             nbformat.v4.new_code_cell("print(a)")])
    executed = nbformat.reads(nbformat.writes(lesson), as_version=4)
    injected = nbformat.v4.new_code_cell('PROFILE = "cpu"')
    injected.metadata["tags"] = ["injected-parameters"]
    executed.cells.insert(2, injected)
    assert cells_changed_since_run(executed, lesson) == 0, "the injected parameters are the run's, not a change"
    lesson.cells[1].source = "a = 2"
    lesson.cells.append(nbformat.v4.new_markdown_cell("a new paragraph"))
    assert cells_changed_since_run(executed, lesson) == 2


def test_links_to_staged_files_follow_them_and_links_to_other_files_become_text():
    pages_ = {ROOT / "notebooks" / "08_credit_assignment.ipynb": "lessons/08_credit_assignment.ipynb",
              ROOT / "docs" / "results.md": "results.md"}
    text = ("See [lesson 08](../notebooks/08_credit_assignment.ipynb#section-2), [the file]"
            "(../results/lessons/08_credit_assignment.json), [TRL](https://github.com/huggingface/trl) and [here](#x).")
    out = rewrite_links(text, ROOT / "docs" / "results.md", "results.md", pages_)
    assert "[lesson 08](lessons/08_credit_assignment.ipynb#section-2)" in out
    assert "the file," in out and "08_credit_assignment.json" not in out
    assert "[TRL](https://github.com/huggingface/trl)" in out and "[here](#x)" in out
    nested = rewrite_links("[results](../results.md)", ROOT / "docs" / "design" / "x.md", "design/x.md", pages_)
    assert nested == "[results](../results.md)"


def test_the_site_has_a_page_per_lesson_the_results_the_guides_and_the_api(site):
    built = {str(p.relative_to(site)) for p in pages(site)}
    assert {f"lessons/{nb.stem}.html" for nb in lessons()} <= built
    assert {"index.html", "results.html", "figures.html", "api.html", "scale.html"} <= built
    assert "agentrl_lite.grpo.GRPOConfig" in (site / "api.html").read_text(), "the API reference has the trainer"
    assert (site / "searchindex.js").is_file()


def test_the_build_has_no_warnings(site):
    """Docstrings, pages and notebooks all parse cleanly: every warning Sphinx printed is a defect of ours."""
    warnings = (site.parent / "sphinx-warnings.txt").read_text().strip()
    assert not warnings, warnings[:3000]


def test_every_internal_link_image_and_anchor_resolves(site):
    assert broken_links(site) == []


def test_formulas_are_mathml_and_nothing_is_fetched_from_the_network(site):
    page = (site / "lessons" / "03_policy_gradients.html").read_text()
    assert page.count("<math") > 10 and "\\(" not in page
    for path in pages(site):
        text = path.read_text()
        assert "cdn." not in text and "unpkg.com" not in text and "googleapis" not in text, path


def test_each_executed_lesson_records_the_committed_run_it_shows():
    executed = sorted((ROOT / EXECUTED).glob("*.ipynb"))
    for path in executed:
        run = executed_run(path)
        assert run is not None, f"{path.name}: not stored by executed.keep_executed"
        committed = read_results(run["results"], run["profile"])
        assert committed is not None and committed["date"] == run["date"], (
            f"{path.name} shows the run of {run['date']}, but results/lessons/{run['results']}.json is from "
            f"{committed and committed['date']}: keep the new run's executed copy (agentrl-lite site --keep)")
        nb = json.loads(path.read_text())
        assert any(o.get("output_type") in ("display_data", "execute_result") and "image/png" in o.get("data", {})
                   for cell in nb["cells"] for o in cell.get("outputs", [])), f"{path.name} has no figure"


@pytest.mark.skipif(NO_BROWSER, reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
def test_every_page_loads_in_chromium_without_a_console_error(site, browser):
    errors = {}
    for page in pages(site):
        browser.open(str(page.relative_to(site)))
        time.sleep(0.2)  # late loads (images, scripts) report after the load event
        severe = [e["message"] for e in browser.driver.get_log("browser") if e["level"] == "SEVERE"]
        if severe:
            errors[str(page.relative_to(site))] = severe
    assert errors == {}


@pytest.mark.skipif(NO_BROWSER, reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
def test_lesson_pages_with_a_committed_run_show_their_figures(site, browser):
    executed = {p.stem for p in (ROOT / EXECUTED).glob("*.ipynb")}
    for nb in lessons():
        browser.open(f"lessons/{nb.stem}.html")
        text = browser.driver.page_source
        if nb.stem in executed:
            assert browser.shown_images() >= 1, f"{nb.stem}: its page shows no figure"
            assert "Outputs from a cpu-profile run" in text
        else:
            assert "No outputs on this page yet" in text, nb.stem
    browser.open("figures.html")
    assert browser.shown_images() == 2


@pytest.mark.skipif(NO_BROWSER, reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
def test_the_search_box_finds_a_lesson_by_a_word_from_its_text(site, browser):
    found = browser.search("GiGPO")
    assert any("lessons/08_credit_assignment.html" in href for href in found), found
    assert browser.search("zzqqxx") == []


def test_a_kept_lesson_loses_widget_views_and_records_its_committed_run(tmp_path):
    import nbformat

    from agentrl_lite.course.executed import keep_executed

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 03 · Policy gradients"),
                                         nbformat.v4.new_code_cell("plot()")])
    nb.cells[1].outputs = [
        nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "x"},
                                                     "text/plain": "SFT: 100%"}),
        nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "y"}}),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo="}),
    ]
    nb.cells[1].metadata["papermill"] = {"duration": 1.0}
    nb.metadata["widgets"] = {"state": {}}
    source = tmp_path / "03_policy_gradients.ipynb"
    nbformat.write(nb, str(source))
    kept = nbformat.read(str(keep_executed(source, "03_policy_gradients", root=tmp_path)), as_version=4)
    outputs = kept.cells[1].outputs
    assert [list(o["data"]) for o in outputs] == [["text/plain"], ["image/png"]], "widget views go, their text stays"
    assert kept.cells[1].metadata == {} and "widgets" not in kept.metadata
    run = kept.metadata["agentrl_run"]
    assert run["date"] == read_results("03_policy_gradients", "cpu")["date"] and run["results"] == "03_policy_gradients"
    with pytest.raises(FileNotFoundError, match="no committed cpu results"):
        keep_executed(source, "no_such_lesson", root=tmp_path)
