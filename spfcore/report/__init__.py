"""Reporting of gate runs: the results document and its files
(:mod:`~spfcore.report.results`), terminal tables (:mod:`~spfcore.report.tables`),
PNG plots (:mod:`~spfcore.report.plots`) and markdown pages
(:mod:`~spfcore.report.markdown`). Reporting reads results; it never judges
(that is :mod:`spfcore.gate`) and the gate never imports it."""

from spfcore.fileio import write_atomic
from spfcore.report.markdown import markdown, results_page
from spfcore.report.plots import plot_load, plot_results, savefig_atomic, ttft_title
from spfcore.report.results import (MEAN_FIELDS, SCHEMA_VERSION, ResultsError, build_results, dumps, json_default,
                                    read_results, summarize, write_results)
from spfcore.report.tables import engine_summary, load_table, make_console, print_report, table, verdict_table
from spfcore.run.cell import error_cell, error_of, error_text

__all__ = ["MEAN_FIELDS", "SCHEMA_VERSION", "ResultsError", "build_results", "dumps", "engine_summary", "error_cell",
           "error_of", "error_text", "json_default", "load_table", "make_console", "markdown", "plot_load",
           "plot_results", "print_report", "read_results", "results_page", "savefig_atomic", "summarize", "table",
           "ttft_title", "verdict_table", "write_atomic", "write_results"]
