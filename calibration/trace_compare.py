"""Static against traced estimates on the published runs we hold that a trace can reproduce
(``vram-estimate --trace``; issue 26 item 2).  Needs torch, transformers and peft::

    PYTHONPATH=. /work/venv-torch/bin/python calibration/trace_compare.py > calibration/trace_compare.md

A run is traced when the trace supports its settings (one device or DDP, no quantised weights,
training or inference, PEFT-style LoRA); the rest are listed with the reason.  Each row gives
both projections of the quantity the source measured (``calibration/evaluate.py``'s
``projection``), the measured figure, and the per-category difference at the trace's peak phase.
The held-out sets of issue 26 and ``published_new.json`` are not read.
"""

from __future__ import annotations

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from calibration.evaluate import _estimate, load, projection  # noqa: E402
from vram_estimator.tracing.compare import as_estimate, differences, plan_of  # noqa: E402

MIB = 1024**2
# traced rows: every distinct model/setting shape of the two files that a trace can run, at the
# published sizes (full size; of each Qwen LoRA sweep two lengths of the 1.8B and one of the 7B,
# for time on a shared 2-core machine; the 14B sweep has the 7B's shape)
CHOSEN = (
    "bert-large bs4 fp32 adamw",
    "bert-large bs1 (accum 4) fp32",
    "bert-large bs1 ckpt fp32",
    "bert-large bs4 fp16",
    "bert-large bs1 ckpt fp16",
    "bert-large bs4 adafactor",
    "bert-large bs1 ckpt fp16 adafactor",
    "llama-2-7b lora q,v r8 bs2 torchtune",
    "tt-readme llama-3.2-3b full packed 4096 (optimization flags)",
    "qwen-1.8b lora seq 256",
    "qwen-1.8b lora seq 2048",
    "qwen-7b lora seq 2048",
)


def _runs():
    for name in ("published_fit.json", "published_heldout.json"):
        for run in load(name)["runs"]:
            yield run


def compare_run(run):
    from vram_estimator.tracing import runner

    static = _estimate(run, run["gpu"])
    plan, _why = plan_of(static)
    started = time.monotonic()
    traced_est = as_estimate(static, runner.trace(plan))
    seconds = time.monotonic() - started
    s, t = projection(run, static)[1], projection(run, traced_est)[1]
    cats = {c: (round(a / MIB), round(b / MIB)) for c, a, b, _ in differences(static, traced_est)}
    return dict(
        id=run["id"], measured=run["measured_mib"], static=round(s), traced=round(t), seconds=round(seconds),
        phase=traced_est.peak_phase, categories=cats,
    )


def untraced(rows_done):
    """The runs not traced here, counted by reason (those a trace could run: left out for time)."""
    done = {r["id"] for r in rows_done}
    reasons = {}
    for run in _runs():
        if run["id"] in done:
            continue
        _plan, why = plan_of(_estimate(run, run["gpu"]))
        why = why or "traceable; not run here, for time (same shape as a traced row)"
        reasons[why] = reasons.get(why, 0) + 1
    return reasons


def markdown(rows, reasons) -> str:
    out = [
        "| run | measured MiB | static MiB | traced MiB | traced vs static | static err | traced err | s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        m, s, t = r["measured"], r["static"], r["traced"]
        out.append(
            f"| {r['id']} | {m} | {s} | {t} | {(t - s) / s * 100:+.1f} % | {(s - m) / m * 100:+.1f} % | "
            f"{(t - m) / m * 100:+.1f} % | {r['seconds']} |"
        )
    out += ["", "| not traced | runs |", "|---|---:|"]
    out += [f"| {why} | {n} |" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return "\n".join(out)


def main() -> None:
    rows = []
    for run in _runs():
        if run["id"] in CHOSEN:
            rows.append(compare_run(run))
            print(json.dumps(rows[-1]), file=sys.stderr)
    with open(os.path.join(ROOT, "calibration", "trace_compare.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1)
    print(markdown(rows, untraced(rows)))


if __name__ == "__main__":
    main()
