"""results.md's account of sequential re-runs (results.json's `sequential`, `sptune.judging.sequential_reruns`), and
the flat names the MLflow parent run carries of it."""

from __future__ import annotations

from typing import Any

SPENDING_TEXT = {"obrien_fleming": "O'Brien-Fleming-type", "pocock": "Pocock-type"}


def _interval(values: list[float] | None) -> str:
    return "-" if not values else f"[{values[0]:+.4f}, {values[1]:+.4f}]"


def _number(x: float | None, fmt: str = "+.4f") -> str:
    return "-" if x is None else format(x, fmt)


def stopped_text(c: dict[str, Any]) -> str:
    """'worse at look 1 (3 seeds)' or 'undecided at look 5 (15 seeds)': where the validation Δ ended the seeds."""
    stop = c["stopped"]
    return f"{stop['verdict']} at look {stop['look']} ({stop['n']} seeds)"


def sequential_lines(doc: dict[str, Any] | None) -> list[str]:
    """A table per compared variant: the verdict, the seeds used, where validation stopped the seeds, the test Δ with
    its sequential and plain intervals, the boundary, and the fixed-N design's seeds; then the rules."""
    if not doc:
        return []
    d = doc["design"]
    head = (
        f"Sequential re-runs (looks after {', '.join(map(str, d['looks']))} seeds; two-sided alpha {d['alpha']:g} "
        f"across the looks, {SPENDING_TEXT.get(d['spending'], d['spending'])} spending; effect ±{d['effect']:g}):"
    )
    lines = [
        "",
        head,
        "",
        "| variant | vs | verdict (test Δ) | seeds used / max | stopped (validation Δ) | test Δ | "
        "sequential interval | plain 95 % t-interval | boundary c | fixed-N seeds |",
        "|---|" * 1 + "---|" * 9,
    ]
    for variant, c in doc["comparisons"].items():
        t = c["test"]
        lines.append(
            f"| {variant} | {c['vs']} | {c['verdict']} | {c['seeds_used']} / {c['max_seeds']} | "
            f"{stopped_text(c)} | {_number(t['mean'])} | {_interval(t['interval'])} | "
            f"{_interval(t['t_interval'])} | {_number(t['boundary'], '.2f')} | {_fixed(c['fixed_n'])} |"
        )
    return [*lines, "", d["rule"], d["fixed_n_rule"]]


def _fixed(n: int | None) -> str:
    return "-" if n is None else str(n)


def mlflow_fields(doc: dict[str, Any] | None) -> tuple[dict[str, str], dict[str, float], dict[str, str]]:
    """The parent run's params (the design), metrics (per variant: seeds used, the test Δ's sequential interval and
    boundary, the fixed-N seeds) and tags (per variant: its verdict and where the seeds stopped)."""
    if not doc:
        return {}, {}, {}
    d = doc["design"]
    params = {
        "rerun_sequential.looks": ",".join(map(str, d["looks"])),
        "rerun_sequential.alpha": str(d["alpha"]),
        "rerun_sequential.effect": str(d["effect"]),
        "rerun_sequential.spending": d["spending"],
    }
    metrics, tags = {}, {}
    for variant, c in doc["comparisons"].items():
        t, at = c["test"], f"sequential.{variant}"
        found = {"seeds_used": c["seeds_used"], "delta": t["mean"], "boundary": t["boundary"], "fixed_n": c["fixed_n"]}
        if t["interval"]:
            found.update(ci_low=t["interval"][0], ci_high=t["interval"][1])
        metrics.update({f"{at}.{k}": float(v) for k, v in found.items() if v is not None})
        tags.update({f"{at}.verdict": c["verdict"], f"{at}.stopped": stopped_text(c)})
    return params, metrics, tags
