"""flake8 tree plugin (entry point ``TPF1``): TPF100/TPF101/TPF102 from ``# vram:`` comments.

The target GPU comes from a ``gpu=`` comment or the ``--vram-gpu`` option (readable from
``[flake8]`` as ``vram-gpu = a100-80gb``); without one nothing is emitted.  Findings are reported
on the first ``# vram:`` comment line, or line 1.  Comments are real COMMENT tokens, read from
flake8's ``lines`` only when some line mentions ``vram`` (asking flake8 for ``file_tokens``
would tokenize every file a second time, for nothing in almost all of them); the script comes
from flake8's ``tree``; the file is never re-read.
The plugin never raises: unexpected failures degrade to no output, bad input to TPF102.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generator, List, Optional, Tuple

from . import __version__

Finding = Tuple[int, int, str, type]


class VramChecker:
    name = "flake8-torch-preflight.vram"
    version = __version__

    vram_gpu: ClassVar[Optional[str]] = None

    def __init__(self, tree: Any, lines: List[str] = None, filename: str = "<stdin>"):
        self.tree = tree
        self.lines = lines or []
        self.filename = filename

    @classmethod
    def add_options(cls, option_manager: Any) -> None:
        option_manager.add_option(
            "--vram-gpu",
            default=None,
            parse_from_config=True,
            metavar="GPU",
            help="default target GPU, instance type or capacity for TPF100-TPF102 (e.g. a100-80gb, "
            "p4de.24xlarge, 48GiB); a '# vram: gpu=...' comment overrides it",
        )

    @classmethod
    def parse_options(cls, options: Any) -> None:
        value = getattr(options, "vram_gpu", None)
        cls.vram_gpu = value.strip() if isinstance(value, str) and value.strip() else None

    def run(self) -> Generator[Finding, None, None]:
        try:
            findings = list(self._findings())
        except Exception:  # noqa: BLE001 - a linter plugin must never crash the run
            findings = []
        yield from findings

    def _findings(self) -> Generator[Finding, None, None]:
        from .api import estimate_source
        from .config_comments import comments_from_source
        from .report import flake8_message

        mentions = any("vram" in line.lower() for line in self.lines)
        tokens = comments_from_source("".join(self.lines)) if mentions else []
        has_comment = any(t[2].lstrip("#").strip().lower().startswith("vram") for t in tokens)
        if not has_comment and not self.vram_gpu:
            return
        result = estimate_source(
            "", filename=self.filename, gpu=self.vram_gpu, tree=self.tree, comment_tokens=tokens
        )
        for err in result.errors:
            yield (
                err.line,
                err.col,
                f"TPF102 [error] {err.message}; fix: correct the '# vram:' comment or option",
                type(self),
            )
        est = result.estimate
        if est is None or est.target is None:
            facts = result.facts
            if facts and facts.unknown_models and est is None and (has_comment or self.vram_gpu):
                text, line = facts.unknown_models[0]
                yield (
                    line,
                    0,
                    f"TPF102 [error] model '{text}' read from line {line} is not in the model database "
                    f"(see `vram-estimate models`); fix: add '# vram: model=<architecture>' or "
                    f"'# vram: params=7B'",
                    type(self),
                )
            return
        message = flake8_message(result)
        if message:
            yield (result.report_line, result.report_col, message, type(self))
