"""flake8 tree plugin (entry point ``TPF1``): TPF100/TPF101/TPF102 from ``# vram:`` comments.

The target GPU comes from a ``gpu=`` comment or the ``--vram-gpu`` option (readable from
``[flake8]`` as ``vram-gpu = a100-80gb``); without one nothing is emitted.  Findings are reported
on the first ``# vram:`` comment line, or line 1.  Comments are real COMMENT tokens, read from
flake8's ``lines`` only when some line mentions ``vram`` (asking flake8 for ``file_tokens``
would tokenize every file a second time, for nothing in almost all of them); the script comes
from flake8's ``tree``, which is only read, never annotated; the file is never re-read.

A bad ``vram-gpu`` is an option error (flake8 stops with one line saying what is wrong);
callers that bypass flake8's options (``vram_findings(..., gpu=...)``) get one TPF102 on line 1.
The plugin never raises: unexpected failures degrade to no output, bad input to TPF102.

:func:`vram_findings` is the structured form (``tpf check`` renders JSON/SARIF/GitHub from it);
:class:`VramChecker` renders its messages from it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generator, List, Optional, Tuple

from . import __version__

Finding = Tuple[int, int, str, type]


def _mentions_vram(lines: List[str]) -> bool:
    return any("vram" in line.lower() for line in lines)


def vram_findings(
    tree: Any, lines: List[str], filename: str = "<stdin>", gpu: Optional[str] = None
) -> List[Any]:
    """TPF100-TPF102 for one file as :class:`report.VramFinding` records (line, col, code,
    severity, what, evidence, fix).  Nearly free on a file with no ``# vram:`` comment and no
    ``gpu``: one scan of the lines for the word."""
    tokens = []
    if _mentions_vram(lines):
        from .reading.config_comments import comments_from_source

        tokens = comments_from_source("".join(lines), tree)
    has_comment = any(t[2].lstrip("#").strip().lower().startswith("vram") for t in tokens)
    if not has_comment and not gpu:
        return []
    from .api import estimate_source
    from .reading.config_comments import check_gpu
    from .report import error_finding, verdict_finding

    found = []
    if gpu:
        _target, why = check_gpu(gpu)
        if why:
            fix = "set vram-gpu to a name from `vram-estimate gpus`"
            found.append(error_finding(1, 0, f"vram-gpu '{gpu[:64]}': {why}", fix))
            gpu = None
            if not has_comment:
                return found
    result = estimate_source("", filename=filename, gpu=gpu, tree=tree, comment_tokens=tokens)
    for err in result.errors:
        if not err.message.startswith("--vram-gpu"):
            found.append(error_finding(err.line, err.col, err.message))
    verdict = verdict_finding(result)
    if verdict is not None:
        found.append(verdict)
    return found


def gpu_option_problem(value: Optional[str]) -> Optional[str]:
    """Why a ``vram-gpu`` option value is not a target, or None."""
    if not value:
        return None
    from .reading.config_comments import check_gpu

    return check_gpu(value)[1]


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
        """Store the target; a bad one stops flake8 with one line (an option error)."""
        value = getattr(options, "vram_gpu", None)
        cls.vram_gpu = value.strip() if isinstance(value, str) and value.strip() else None
        why = gpu_option_problem(cls.vram_gpu)
        if why:
            try:
                from flake8.exceptions import ExecutionError
            except ImportError:  # pragma: no cover - flake8 is a dependency
                return
            raise ExecutionError(f"vram-gpu = {cls.vram_gpu[:64]}: {why}")

    def run(self) -> Generator[Finding, None, None]:
        try:
            findings = vram_findings(self.tree, self.lines, self.filename, self.vram_gpu)
        except Exception:  # noqa: BLE001 - a linter plugin must never crash the run
            findings = []
        for f in findings:
            yield (f.line, f.col, f.message(), type(self))
