"""A report as a list of blocks (headings, paragraphs, tables, figures), written once as Markdown
by a Jinja2 template (figures as PNG files beside it) and rendered from that Markdown by
markdown-it-py into one self-contained HTML page (figures inline as base64 PNG)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from functools import lru_cache


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str  # may hold **bold** and `code`
    css: str = ""  # "callout" for the headline numbers


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    bold_rows: set[int] = field(default_factory=set)


@dataclass
class Figure:
    name: str  # file stem, e.g. "fig2-forward-times"
    png: bytes
    caption: str


Block = Heading | Paragraph | Bullets | Table | Figure


def _cell(text) -> str:
    """A table cell's Markdown: pipes escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


@lru_cache(maxsize=1)
def _templates():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("babelspec.report", "templates"),
                             keep_trailing_newline=True, autoescape=jinja2.select_autoescape(["html", "html.j2"]))
    env.filters["cell"] = _cell
    return env


def to_markdown(blocks: list[Block], figure_dir: str = "figures") -> str:
    """The report as Markdown (``templates/report.md.j2``): figures as PNG files in ``figure_dir``."""
    return _templates().get_template("report.md.j2").render(blocks=blocks, figure_dir=figure_dir).rstrip("\n") + "\n"


def to_html(blocks: list[Block], title: str) -> str:
    """The same Markdown rendered by markdown-it-py into one self-contained page: each figure
    inline as a base64 PNG."""
    from markdown_it import MarkdownIt
    from markupsafe import Markup

    pngs = {f"figures/{b.name}.png": b.png for b in blocks if isinstance(b, Figure)}
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    default_image = md.renderer.rules["image"]

    def inline_image(renderer, tokens, idx, options, env):
        token = tokens[idx]
        png = pngs.get(str(token.attrGet("src") or ""))
        if png is not None:
            token.attrSet("src", "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
        return default_image(tokens, idx, options, env)

    md.add_render_rule("image", inline_image)
    body = md.render(to_markdown(blocks))
    return _templates().get_template("page.html.j2").render(title=title, body=Markup(body))
