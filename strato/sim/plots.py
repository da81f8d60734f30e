"""PNG plots of a comparison: utilization over time, latency CDF, rejections by reason.

matplotlib is an optional dependency (the `sim` extra); without it the
report is written without plots and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from strato.sim.runner import RunResult


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_all(results: Sequence[RunResult], out: Path) -> list[str]:
    """Write every plot into `out`; the file names written."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    return [utilization(results, out), latency_cdf(results, out), rejections(results, out)]


def utilization(results: Sequence[RunResult], out: Path) -> str:
    import matplotlib.pyplot as plt

    classes = results[0].metrics.model.classes
    fig, axes = plt.subplots(len(classes), 1, figsize=(9, 2.4 * len(classes)), sharex=True,
                             squeeze=False)
    for j, rc in enumerate(classes):
        ax = axes[j][0]
        for r in results:
            s = r.metrics.series
            if s.times:
                ax.plot(np.array(s.times) / 3600.0, [u[j] * 100 for u in s.utilization],
                        label=r.policy, linewidth=1)
        ax.set_ylabel(f"{rc} used %")
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    axes[0][0].legend(loc="lower right", fontsize="small")
    axes[-1][0].set_xlabel("virtual time (hours)")
    fig.suptitle("Utilization over time per class")
    fig.tight_layout()
    name = "utilization.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def latency_cdf(results: Sequence[RunResult], out: Path) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for r in results:
        lat = np.sort(np.frombuffer(r.metrics.latencies, dtype=np.float64)) * 1000.0
        if lat.size:
            ax.plot(lat, np.arange(1, lat.size + 1) / lat.size, label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("decision latency (ms, log scale)")
    ax.set_ylabel("share of requests")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    ax.set_title("Decision latency CDF")
    fig.tight_layout()
    name = "latency_cdf.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def rejections(results: Sequence[RunResult], out: Path) -> str:
    import matplotlib.pyplot as plt

    reasons = sorted({k for r in results for k in r.metrics.reasons})
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * max(1, len(reasons)) * len(results) / 2))
    height = 0.8 / max(1, len(results))
    y = np.arange(len(reasons))
    for i, r in enumerate(results):
        ax.barh(y + i * height, [r.metrics.reasons.get(k, 0) for k in reasons], height,
                label=r.policy)
    ax.set_yticks(y + height * (len(results) - 1) / 2, reasons, fontsize="small")
    ax.set_xlabel("rejected requests")
    ax.legend(fontsize="small")
    ax.set_title("Rejections by reason")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    name = "rejections.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name
