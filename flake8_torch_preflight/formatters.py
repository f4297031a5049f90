"""flake8 reporters: `flake8 --format=tpf-json` and `flake8 --format=tpf-sarif`.

They collect every violation flake8 reports (ours and every other plugin's, E999 included)
and write one document when the run ends, through flake8's own output handling
(`--output-file`, `--tee`). The rendering is shared with `tpf check`.
"""
from __future__ import annotations

from typing import List

from flake8.formatting.base import BaseFormatter

from . import reporting


class _Collecting(BaseFormatter):
    def after_init(self) -> None:
        self.items: List[reporting.Item] = []

    def handle(self, error) -> None:
        self.items.append(reporting.Item.from_text(
            error.filename, error.line_number, error.column_number or 1, error.code, error.text))

    def format(self, error) -> None:   # handle() does the work
        return None

    def show_source(self, error) -> None:
        return None

    def show_statistics(self, statistics) -> None:
        return None

    def show_benchmarks(self, benchmarks) -> None:
        return None

    def render(self, items: List[reporting.Item]) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        self._write(self.render(reporting.sort_items(self.items)))
        super().stop()


class JsonFormatter(_Collecting):
    """`--format=tpf-json`: one JSON document with every violation."""

    def render(self, items: List[reporting.Item]) -> str:
        return reporting.render_json(items)


class SarifFormatter(_Collecting):
    """`--format=tpf-sarif`: SARIF 2.1.0 for GitHub code scanning and other SARIF viewers."""

    def render(self, items: List[reporting.Item]) -> str:
        return reporting.render_sarif(items)
