"""Summarise calibration/*.json into the markdown tables quoted in docs/vram.md."""

from __future__ import annotations

import collections
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    path = os.path.join(HERE, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def main():
    acts = load("activations.json")
    if acts:
        print(
            f"### Activation term vs saved-tensor measurement (torch {acts['torch']}, transformers "
            f"{acts['transformers']}, CPU)\n"
        )
        print(
            "Worst |error| per family and setting, over the fitted configs and the held-out larger configs.\n"
        )
        print(
            "| family | precision | attention | checkpointing | fit: configs, worst "
            "| held-out: configs, worst |"
        )
        print("|---|---|---|---|---:|---:|")
        groups = collections.defaultdict(lambda: {"fit": [], "check": []})
        for r in acts["rows"]:
            groups[(r["style"], r["precision"], r["attention"], r["checkpointing"])][r["split"]].append(
                abs(r["error_pct"])
            )
        total = within = 0
        for key in sorted(groups):
            g = groups[key]
            total += len(g["fit"]) + len(g["check"])
            within += sum(e <= 10 for e in g["fit"] + g["check"])
            fit = f"{len(g['fit'])}, {max(g['fit']):.1f}%" if g["fit"] else "-"
            chk = f"{len(g['check'])}, {max(g['check']):.1f}%" if g["check"] else "-"
            print(f"| {key[0]} | {key[1]} | {key[2]} | {'on' if key[3] else 'off'} | {fit} | {chk} |")
        print(f"\n{within}/{total} configs within 10 %.\n")
    cnn = load("cnn.json")
    if cnn:
        print("### CNN activations (per-image bytes at 224 measured, scaled by (image/224)^2)\n")
        print("| model | precision | image | batch | split | measured MiB | estimate MiB | error |")
        print("|---|---|---:|---:|---|---:|---:|---:|")
        for r in cnn["rows"]:
            print(
                f"| {r['model']} | {r['precision']} | {r['image']} | {r['batch']} | {r['split']} | "
                f"{r['measured'] / 2**20:.1f} | {r['estimate'] / 2**20:.1f} | {r['error_pct']:+.1f}% |"
            )
        print()
    evaluation = load("evaluation.json")
    if evaluation:
        from evaluate import markdown  # calibration/evaluate.py, beside this file

        print("### Published measured peaks vs our projection (calibration/evaluate.py)\n")
        for name, part in evaluation.items():
            print(markdown(name, part["rows"], part["summary"], part["rates"]))
            print()


if __name__ == "__main__":
    main()
