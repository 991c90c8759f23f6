"""Writes an analysis: every table as Markdown, CSV and JSON (``OUT/tables/``), every
figure as PNG (``OUT/figures/``), and one self-contained ``OUT/report.html`` embedding
them all (images inlined as data URIs: the file can be mailed or opened offline).

The output directory is written beside itself and renamed into place, so a failed
analysis never leaves half a report over a previous one.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..errors import RsrError
from ..output_dirs import check_output_dir
from .plots import draw_figures, plots_available
from .tables import AnalysisInput, Table, all_tables

__all__ = ["AnalysisReport", "format_value", "render_markdown", "write_analysis"]

SCRIPTED_WARNING = (
    "These results come from the scripted stand-in model, a TEST DOUBLE that types the "
    "tasks' reference solutions with a seeded probability: not a model's results."
)


class AnalysisReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`write_analysis` wrote."""

    out: Path
    tables: list[str]
    figures: list[str]
    figures_skipped: str | None
    """Why no figure was drawn (the plotting extra is missing), else None."""
    figures_failed: dict[str, str] = msgspec.field(default_factory=dict)
    """Figures that raised while drawing, with the error (the tables are still written)."""
    figures_not_drawn: dict[str, str] = msgspec.field(default_factory=dict)
    """Figures the input has nothing for, with why (one harness: no UpSet plot)."""


def format_value(value: Any) -> str:
    """How a cell reads in Markdown and HTML: floats to 3 decimals, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def render_markdown(table: Table, *, origin: str = "", scripted: bool = False) -> str:
    """One table as GitHub Markdown, its notes after it."""
    lines = [f"## {table.title}", ""]
    if scripted:
        lines += [f"> {SCRIPTED_WARNING}", ""]
    if origin:
        lines += [f"Source: {origin}", ""]
    lines.append("| " + " | ".join(table.columns) + " |")
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    for row in table.rows:
        cells = [format_value(v).replace("|", "\\|") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    if not table.rows:
        lines.append("| " + " | ".join("-" for _ in table.columns) + " |")
    lines.append("")
    lines += [f"- {note}" for note in table.notes]
    return "\n".join(lines).rstrip() + "\n"


def _csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows([["" if v is None else v for v in row] for row in table.rows])
    return buffer.getvalue()


def _json(table: Table, data: AnalysisInput) -> bytes:
    document = {
        **msgspec.to_builtins(table),
        "origin": data.origin,
        "scripted_model": data.scripted,
        "records": [dict(zip(table.columns, row, strict=True)) for row in table.rows],
    }
    return msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;font-size:.9em}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
.notes{color:#555;font-size:.85em}.warn{background:#fff3cd;border:1px solid #e0c36c;padding:.6em}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
"""


def _html(
    data: AnalysisInput,
    tables: Sequence[Table],
    figures: Sequence[Path],
    skipped: str | None,
    failed: dict[str, str],
    not_drawn: dict[str, str] | None = None,
) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>rsr_async analysis</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>rsr_async analysis</h1>",
        f"<p>Source: {html.escape(data.origin)}. Tasks: {len(data.tasks)}; harnesses: "
        f"{html.escape(', '.join(data.harnesses) or '-')}; k = {data.k}.</p>",
    ]
    if data.scripted:
        parts.append(f"<p class='warn'>{html.escape(SCRIPTED_WARNING)}</p>")
    parts.append("<h2>Figures</h2>")
    if skipped:
        parts.append(f"<p class='notes'>No figures: {html.escape(skipped)}.</p>")
    for name, error in failed.items():
        parts.append(f"<p class='warn'>Figure {html.escape(name)} failed: {html.escape(error)}</p>")
    for name, why in (not_drawn or {}).items():
        parts.append(f"<p class='notes'>Figure {html.escape(name)} not drawn: {html.escape(why)}.</p>")
    for path in figures:
        encoded = base64.b64encode(path.read_bytes()).decode()
        parts.append(
            f"<figure><img alt='{html.escape(path.stem)}' src='data:image/png;base64,{encoded}'>"
            f"<figcaption>{html.escape(path.stem)}</figcaption></figure>"
        )
    for table in tables:
        parts.append(f"<h2 id='{html.escape(table.name)}'>{html.escape(table.title)}</h2><table><tr>")
        parts += [f"<th>{html.escape(c)}</th>" for c in table.columns]
        parts.append("</tr>")
        for row in table.rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(format_value(v))}</td>" for v in row) + "</tr>")
        parts.append("</table>")
        parts += [f"<p class='notes'>{html.escape(note)}</p>" for note in table.notes]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_analysis(data: AnalysisInput, out: str | Path, *, figures: bool = True) -> AnalysisReport:
    """Compute every table of ``data`` and write the report into ``out`` (replaced whole:
    only an empty directory or an earlier analysis, see :func:`check_output_dir`)."""
    out = check_output_dir(out, "analysis")
    tables = all_tables(data)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise RsrError(f"{out}: cannot create the analysis directory: {exc}") from exc
    try:
        (staging / "tables").mkdir()
        for table in tables:
            base = staging / "tables" / table.name
            base.with_suffix(".md").write_text(
                render_markdown(table, origin=data.origin, scripted=data.scripted), encoding="utf-8"
            )
            base.with_suffix(".csv").write_text(_csv(table), encoding="utf-8")
            base.with_suffix(".json").write_bytes(_json(table, data))
        skipped = None if figures else "figures not asked for (--no-figures)"
        if figures:
            skipped = plots_available()
        drawn, failed, not_drawn = (
            ([], {}, {})
            if skipped
            else draw_figures(tables, staging / "figures", scripted=data.scripted)
        )
        (staging / "figures").mkdir(exist_ok=True)
        page = _html(data, tables, drawn, skipped, failed, not_drawn)
        (staging / "report.html").write_text(page, encoding="utf-8")
        _replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return AnalysisReport(
        out=out,
        tables=[t.name for t in tables],
        figures=[p.stem for p in drawn],
        figures_skipped=skipped,
        figures_failed=failed,
        figures_not_drawn=not_drawn,
    )


def _replace(staging: Path, out: Path) -> None:
    """Put ``staging`` where ``out`` is, keeping the old one until the new one is in place."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    try:
        staging.rename(out)
    except OSError as exc:
        if old is not None:
            old.rename(out)
        raise RsrError(f"{out}: cannot write the analysis: {exc}") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
