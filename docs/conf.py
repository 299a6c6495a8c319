# Sphinx configuration of the course site. `make site` (agentrl_lite.course.site) stages this folder, the lessons
# and the generated pages into build/site-src/ and builds build/site/ from there, offline: the theme (furo), the
# notebook reader (myst-nb) and the formulas' MathML (latex2mathml) all come from installed packages, and no
# page loads anything from the network.
from __future__ import annotations

import html
import os
import re
import sys

from docutils import nodes

sys.path.insert(0, os.environ.get("AGENTRL_SITE_REPO", os.path.abspath("..")))  # autodoc imports the library

project = "agentrl_lite"
author = "the agentrl_lite maintainers"
copyright = "2026, the agentrl_lite maintainers"
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # lessons carry the outputs of the cpu run named in their banner, or none
nb_merge_streams = True
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]  # no widget JS offline
suppress_warnings = ["mystnb.unknown_mime_type", "myst.xref_missing", "misc.highlighting_failure"]
exclude_patterns = ["_build", "conf.py", "**/.ipynb_checkpoints"]
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
autodoc_typehints = "description"
autodoc_mock_imports = []

html_theme = "furo"
html_title = "agentrl_lite: RL for tool-using LLM agents"
html_static_path = ["_static"]
html_show_sourcelink = False
html_math_renderer = "mathml"  # formulas become MathML when the site is built (latex2mathml), which browsers
# render themselves: no MathJax, no web fonts, nothing fetched
html_favicon = "_static/favicon.svg"
default_role = "code"  # the docstrings write `name` for code, as markdown does


def _markdownish_docstring(app, what, name, obj, options, lines):
    """The library's docstrings are plain text with markdown's backticks, not reStructuredText: escape the two
    characters reST would read as markup (|x| substitutions, lone * emphasis)."""
    for i, line in enumerate(lines):
        line = line.replace("|", "\\|").replace("*", "\\*").replace("```", "\\`\\`\\`")  # ```c: a fence's name
        line = re.sub(r"(?<!`)(`[^`\s][^`]*`)(?=\w)", r"\1\\ ", line)  # `exec`s: reST wants a break after the role
        lines[i] = re.sub(r"(?<=\w)(`[^`\s][^`]*`)(?!`)", r"\\ \1", line)


def _mathml(node, display: str) -> str:
    from latex2mathml.converter import convert

    try:
        return convert(node.astext(), display=display)
    except Exception:  # a formula the converter cannot read is shown as its source, not lost
        return f'<code class="math-source">{html.escape(node.astext())}</code>'


def _visit_inline(self, node):
    self.body.append(_mathml(node, "inline"))
    raise nodes.SkipNode


def _visit_block(self, node):
    self.body.append(f'<div class="math-display">{_mathml(node, "block")}</div>')
    raise nodes.SkipNode


def setup(app):
    app.connect("autodoc-process-docstring", _markdownish_docstring)
    app.add_html_math_renderer("mathml", (_visit_inline, None), (_visit_block, None))
