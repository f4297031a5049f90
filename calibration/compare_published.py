"""Compare published measured peaks (calibration/published_peaks.json) with our estimates.

Runs without torch.  Writes calibration/published_results.json and prints a markdown table
with the mean absolute percentage error.  For sources that measured device 'used' memory
(nvml / nvidia-smi), the projection is our point estimate (tensors + allocator slack) plus the
CUDA context the same source measured.

    python calibration/compare_published.py
"""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from vram_estimator.api import estimate_config  # noqa: E402

MIB = 1024**2


def compare(path: str = os.path.join(ROOT, "calibration", "published_peaks.json")):
    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    rows = []
    for run in doc["runs"]:
        result = estimate_config(gpu=run["gpu"], **run["inputs"])
        est = result.estimate
        extra = run.get("context_mib", 0) if run["quantity"] in ("nvml used", "nvidia-smi") else 0
        projected = est.point / MIB + extra
        err = (projected - run["measured_mib"]) / run["measured_mib"] * 100
        inside = est.lower / MIB + extra <= run["measured_mib"] <= est.upper / MIB + extra
        rows.append(
            dict(
                id=run["id"],
                source=run["source"],
                measured_mib=run["measured_mib"],
                projected_mib=round(projected),
                lower_mib=round(est.lower / MIB + extra),
                upper_mib=round(est.upper / MIB + extra),
                error_pct=round(err, 2),
                in_interval=inside,
            )
        )
    mae = sum(abs(r["error_pct"]) for r in rows) / len(rows)
    return rows, mae


def main():
    rows, mae = compare()
    print("| run | measured MiB | projected MiB | interval MiB | error |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['id']} | {r['measured_mib']} | {r['projected_mib']} | {r['lower_mib']}–{r['upper_mib']} | "
            f"{r['error_pct']:+.1f}% |"
        )
    print(
        f"\nmean absolute error: {mae:.1f}% over {len(rows)} runs; "
        f"{sum(r['in_interval'] for r in rows)}/{len(rows)} inside the interval"
    )
    with open(os.path.join(ROOT, "calibration", "published_results.json"), "w", encoding="utf-8") as handle:
        json.dump(dict(mae_pct=round(mae, 2), rows=rows), handle, indent=1)


if __name__ == "__main__":
    main()
