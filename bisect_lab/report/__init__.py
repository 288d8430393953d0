"""``bisect-lab report CAMPAIGN|SWEEP``: a Markdown file or a self-contained HTML page (layer 6).

A report is written for someone who did not run the campaign: it opens with the answer in one
sentence, then says what was compared and how, then shows the evidence (tables and figures: each
arm's values in run order, the distributions, the effect of each factor, the bisection path, sweep
series with change points), then what could make the numbers wrong (environment differences between
trials, env vars that did not reach the benchmark's processes, failed trials with their errors).

The answer, its colour and every verdict come from the campaign's stored result
(:mod:`bisect_lab.results`), as the campaign decided them; the report recomputes nothing the
campaign concluded. Only a campaign that stored no comparisons (interrupted, failed) has them
computed from its trials, and its report says so.

``what`` is a campaign id (a unique prefix is enough, ``latest`` the newest) or the name of a
sweep. The CLI writes ``<results>/reports/<campaign id>.<fmt>`` (:func:`report_name`: ``latest``
resolved to the id, so a later campaign's report never overwrites it). HTML embeds its figures as
base64 PNGs; Markdown writes them next to the file (``<stem>_files/``).

API::

    from bisect_lab.report import build_report, write_report
    path = write_report(store, "20261129-0748", fmt="html", out="report.html")

Modules: ``document`` (the Report / Section / Table / Figure model and its redaction),
``sections`` (the parts every kind shares), one module per kind (``run``, ``attribution``,
``bisection``, ``sweep``), ``build`` (which report a name asks for), ``formats`` (Markdown, HTML,
writing the file).
"""
from __future__ import annotations

from .build import build_report, campaign_named, report_name
from .document import Figure, Report, Section, Table
from .formats import to_html, to_markdown, write_report

__all__ = ["Report", "Section", "Table", "Figure", "build_report", "campaign_named", "report_name", "write_report", "to_markdown", "to_html"]
