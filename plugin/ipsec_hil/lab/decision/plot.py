"""PNG plots for the page and Allure: parent vs candidate, the search's trials, latency.

Why these three: a reader trusts a verdict faster when they see the trials behind it (the
drift the pairing removed, the interval against the equivalence band), and a search's
bounds are clearer as points on a load/loss plane than as a list of numbers.

Uses matplotlib's object API (``Figure`` + Agg canvas), never ``pyplot``: no global state,
no display backend, safe in pytest-xdist workers. Each function returns the PNG bytes and,
given ``path``, also writes them there.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ipsec_hil.lab.decision.compare import Comparison, Verdict
from ipsec_hil.lab.decision.errors import bad
from ipsec_hil.lab.decision.latency import LatencySummary
from ipsec_hil.lab.decision.search import WARMUP, SearchResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure(**kw: Any) -> "Figure":
    """A new Figure. matplotlib is imported here, on the first plot: importing it costs
    every pytest process that loads the suite ~0.3 s of CPU (issue 15), and most never plot."""
    from matplotlib.figure import Figure

    return Figure(**kw)

VERDICT_COLOURS = {Verdict.REGRESSION: "#c0392b", Verdict.PROGRESSION: "#1e8449", Verdict.NO_CHANGE: "#34495e",
                   Verdict.UNRESOLVED: "#d68910", Verdict.NOT_JUDGED: "#7f8c8d"}
PARENT_COLOUR, CANDIDATE_COLOUR = "#2e86c1", "#e67e22"


def _png(fig: "Figure", path: Path | str | None) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    data = buffer.getvalue()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def plot_comparisons(comparisons: Sequence[Comparison], path: Path | str | None = None) -> bytes:
    """One row per figure: left the trials in measurement order, right the ratio and interval."""
    if not comparisons:
        raise bad("comparisons", comparisons, "at least one Comparison")
    fig = _figure(figsize=(10, 2.4 * len(comparisons)))
    axes = fig.subplots(len(comparisons), 2, squeeze=False, gridspec_kw={"width_ratios": [3, 2]})
    for row, c in zip(axes, comparisons):
        trials_ax, ratio_ax = row
        # pair i is measurement slots 2i and 2i+1 in both schedules; plot at slot position
        xs = range(len(c.parent))
        trials_ax.plot([2 * i for i in xs], c.parent, "o-", color=PARENT_COLOUR, label="parent")
        trials_ax.plot([2 * i + 1 for i in range(len(c.candidate))], c.candidate, "s-",
                       color=CANDIDATE_COLOUR, label="candidate")
        trials_ax.set_title(f"{c.figure} ({c.direction.value})", fontsize=10, loc="left")
        trials_ax.set_xlabel("trial (pair i = trials 2i, 2i+1)")
        trials_ax.set_ylabel(c.unit or "value")
        trials_ax.legend(fontsize=8, loc="best")
        t = c.rule.threshold
        colour = VERDICT_COLOURS[c.verdict]
        ratio_ax.axvspan(1 - t, 1 + t, color="#d5d8dc", label=f"+-{100 * t:g} % equivalence")
        ratio_ax.axvline(1.0, color="black", linewidth=0.8)
        ratio_ax.errorbar([c.ratio], [0], xerr=[[c.ratio - c.ci_low], [c.ci_high - c.ratio]],
                          fmt="o", color=colour, capsize=6, markersize=8)
        ratio_ax.set_yticks([])
        lo = min(c.ci_low, 1 - t) - 0.05
        hi = max(c.ci_high, 1 + t) + 0.05
        ratio_ax.set_xlim(lo, hi)
        ratio_ax.set_xlabel("candidate / parent (ratio of means)")
        ratio_ax.set_title(
            f"{c.verdict.value}: {c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]",
            fontsize=10, color=colour, loc="left",
        )
        ratio_ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return _png(fig, path)


def plot_search(result: SearchResult, path: Path | str | None = None, *, unit: str = "") -> bytes:
    """Offered load vs loss ratio of every trial; each goal's bounds as vertical lines."""
    fig = _figure(figsize=(9, 5))
    ax = fig.subplots()
    phases = sorted({t.phase for t in result.trials if t.role != WARMUP})
    import matplotlib

    cmap = matplotlib.colormaps["Blues"]
    for i, phase in enumerate(phases):
        ts = [t for t in result.trials if t.phase == phase and t.role != WARMUP and not t.bench_short]
        colour = cmap(0.35 + 0.65 * i / max(1, len(phases) - 1))  # darker = longer trials
        if not ts:
            continue
        ax.scatter([t.load for t in ts], [t.loss_ratio for t in ts], color=colour, s=36, zorder=3,
                   label=f"phase {phase}: {ts[0].result.duration:.3g} s trials")
    short = [t for t in result.trials if t.bench_short]
    if short:  # no result at the load asked: drawn at the load that left
        ax.scatter([t.result.achieved for t in short], [t.loss_ratio for t in short], marker="x", color="#c0392b",
                   s=50, zorder=4, label="the bench could not offer the load (at what left)")
    warm = [t for t in result.trials if t.role == WARMUP and not t.bench_short]
    if warm:
        ax.scatter([t.load for t in warm], [t.loss_ratio for t in warm], facecolors="none",
                   edgecolors="grey", s=60, label="warm-up (discarded)")
    styles = ["#c0392b", "#e67e22", "#8e44ad", "#1e8449"]
    for i, g in enumerate(result.goals):
        colour = styles[i % len(styles)]
        ax.axhline(g.goal.loss_ratio, color=colour, linewidth=0.6, linestyle=":")
        if g.lower_bound is not None:
            ax.axvline(g.lower_bound, color=colour, linewidth=1.2, label=f"{g.goal.name} lower {g.lower_bound:.4g}")
        if g.upper_bound is not None:
            ax.axvline(g.upper_bound, color=colour, linewidth=1.2, linestyle="--",
                       label=f"{g.goal.name} upper {g.upper_bound:.4g}")
        elif g.lower_bound is not None:
            ax.text(g.lower_bound, 1e-4, f" {g.goal.name}: at least, not bracketed", color=colour, fontsize=8,
                    rotation=90, va="bottom")
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_ylim(0, max(1e-3, max(t.loss_ratio for t in result.trials)) * 2)
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.set_xlabel(f"offered load{f' ({unit})' if unit else ''}")
    ax.set_ylabel("loss ratio (symlog; 0 = no loss)")
    ax.set_title(f"NDR/PDR search: {result.trial_count} trials, {result.trial_time:.1f} s of traffic",
                 fontsize=10, loc="left")
    ax.grid(True, linewidth=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: bounds sit anywhere
    fig.tight_layout()
    return _png(fig, path)


def plot_latency(summaries: Sequence[LatencySummary], path: Path | str | None = None) -> bytes:
    """Min, median and p99 latency (microseconds) per fraction of PDR."""
    if not summaries:
        raise bad("summaries", summaries, "at least one LatencySummary")
    fig = _figure(figsize=(7, 4))
    ax = fig.subplots()
    labels = [f"{s.fraction:.0%}" for s in summaries]
    xs = list(range(len(summaries)))
    for offset, name, colour in ((-0.25, "min", "#85c1e9"), (0.0, "median", "#2e86c1"), (0.25, "p99", "#1b4f72")):
        ax.bar([x + offset for x in xs], [getattr(s, name) * 1e6 for s in summaries], width=0.25,
               color=colour, label=name)
    ax.set_xticks(xs, labels)
    ax.set_xlabel("offered load, fraction of PDR")
    ax.set_ylabel("latency (us)")
    ax.legend(fontsize=8)
    ax.set_title("latency at fractions of PDR (p99: nearest rank)", fontsize=10, loc="left")
    fig.tight_layout()
    return _png(fig, path)
