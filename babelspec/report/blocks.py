"""A report as a list of blocks (headings, paragraphs, tables, figures) rendered twice:
Markdown (figures as PNG files beside it) and one self-contained HTML page (figures inline
as base64 PNG)."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field


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


def _inline_md_to_html(text: str) -> str:
    text = html.escape(text, quote=False)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], figure_dir: str = "figures") -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            out.append(("> " + b.text) if b.css == "callout" else b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            lines = ["| " + " | ".join(map(_md_cell, b.header)) + " |",
                     "|" + "|".join("---" for _ in b.header) + "|"]  # fmt: skip
            for i, row in enumerate(b.rows):
                cells = [f"**{_md_cell(c)}**" if i in b.bold_rows and c != "" else _md_cell(c)
                         for c in row]  # fmt: skip
                lines.append("| " + " | ".join(cells) + " |")
            if b.caption:
                lines.append("\n" + b.caption)
            out.append("\n".join(lines))
        elif isinstance(b, Figure):
            out.append(f"![{b.caption}]({figure_dir}/{b.name}.png)\n\n*{b.caption}*")
    return "\n\n".join(out) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:right}
th{background:#f2f2f2} td:first-child,th:first-child{text-align:left}
tr.bold td{font-weight:700;background:#fff8e0}
.callout{font-size:1.15em;background:#eef5ff;border-left:5px solid #2a6fdb;padding:.6em 1em}
figure{margin:1em 0} figure img{max-width:100%} figcaption{font-size:.9em;color:#555}
code{background:#f4f4f4;padding:0 .2em} .caption{font-size:.85em;color:#555}
"""


def to_html(blocks: list[Block], title: str) -> str:
    out = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}"
           f"</title><style>{_CSS}</style></head><body>"]  # fmt: skip
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            css = f" class='{b.css}'" if b.css else ""
            out.append(f"<p{css}>{_inline_md_to_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_inline_md_to_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            rows = ["<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in b.header) + "</tr>"]
            for i, row in enumerate(b.rows):
                css = " class='bold'" if i in b.bold_rows else ""
                rows.append(f"<tr{css}>" + "".join(f"<td>{_inline_md_to_html(str(c))}</td>" for c in row) + "</tr>")
            cap = f"<div class='caption'>{_inline_md_to_html(b.caption)}</div>" if b.caption else ""
            out.append("<table>" + "".join(rows) + "</table>" + cap)
        elif isinstance(b, Figure):
            data = base64.b64encode(b.png).decode("ascii")
            out.append(f"<figure><img alt='{html.escape(b.caption, quote=True)}' "
                       f"src='data:image/png;base64,{data}'><figcaption>"
                       f"{_inline_md_to_html(b.caption)}</figcaption></figure>")  # fmt: skip
    out.append("</body></html>")
    return "\n".join(out)
