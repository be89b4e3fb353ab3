"""Reports of experiment runs: tables, figures, Markdown and self-contained HTML."""

from babelspec.report.build import build_report, report_blocks

__all__ = ["build_report", "report_blocks"]
