"""Render the dashboard's panels to one PNG from a live Prometheus (matplotlib), so a
reader sees what the dashboard shows without running Grafana."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import httpx

from monitoring.dashboard import PANELS


def substitute(expr: str, rate_window: str = "30s") -> str:
    return (expr.replace("$__rate_interval", rate_window).replace("$model_name", ".*")
            .replace("$instance", ".*"))


def render(prometheus: str, out: Path, minutes: float = 5, step: float = 2,
           rate_window: str = "30s") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = time.time()
    start = end - minutes * 60
    cols = 3
    rows = math.ceil(len(PANELS) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.2 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, PANELS, strict=False):
        for legend, expr in panel.targets:
            r = httpx.get(f"{prometheus}/api/v1/query_range", params={
                "query": substitute(expr, rate_window), "start": start, "end": end,
                "step": step}, timeout=30).json()
            for series in r.get("data", {}).get("result", []):
                xs = [float(t) - end for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                label = legend
                for k, v in series["metric"].items():
                    label = label.replace("{{" + k + "}}", v)
                ax.plot(xs, ys, label=label)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("seconds before render", fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.lines:
            ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(PANELS):]:
        ax.axis("off")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prometheus", default="http://127.0.0.1:9090")
    ap.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    ap.add_argument("--minutes", type=float, default=5)
    print(render(**vars(ap.parse_args())))


if __name__ == "__main__":
    main()
