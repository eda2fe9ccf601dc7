"""Live metrics for Prometheus/Grafana through Ray's own metrics API (`ray.util.metrics`).

Trials (Ray actors) export what each epoch returned; the driver exports how many trials are in
each state. Ray's metrics agent on each node serves them with the prefix ``ray_`` (e.g.
``ray_sptune_val_acc``) beside Ray's node metrics; dashboards/ holds the Prometheus scrape config
and the Grafana dashboard over them. Nothing here reaches MLflow: that stays the driver's
`tracking.TrialRunLogger`.

The metric objects are made on first use, once per process (a trial's actor or the driver), so a
reused actor keeps one set for all its trials. The `stage` tag is the trial's phase (pretrain, search,
rerun), as the dashboards name it.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ray import tune
from ray.util.metrics import Counter, Gauge, Histogram

TRIAL_TAGS = ("study", "variant", "stage", "trial")
STATE_TAGS = ("study", "variant", "stage", "state")
# Ray Tune's Trial.status values, lower-cased for the label.
TRIAL_STATES = ("pending", "running", "paused", "terminated", "error")
# Epoch durations from a tiny CPU model to a large GPU one (seconds).
EPOCH_SECONDS_BUCKETS = [0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800]
# Per-trial gauges: the epoch result key each one shows (pretraining reports losses, no accuracy).
_EPOCH_GAUGES = {
    "val_acc": "validation accuracy of the trial's latest epoch",
    "best_val_acc": "best validation accuracy of the trial so far (the epoch sptune would select)",
    "val_loss": "validation loss of the trial's latest epoch",
    "best_val_loss": "validation loss of the trial's best epoch so far (pretraining trials rank by it)",
}

_metrics: dict[str, Any] | None = None  # this process's metric objects, made by _get()


def _get() -> dict[str, Any]:
    global _metrics
    if _metrics is None:
        found: dict[str, Any] = {
            "epochs": Counter("sptune_epochs", "epochs finished by the trial", tag_keys=TRIAL_TAGS),
            # A counter, so rate() gives a variant's throughput now; the gauge below keeps each
            # trial's last epoch, finished trials' too (Ray exports a gauge until its process ends).
            "tokens": Counter("sptune_tokens", "training tokens processed", tag_keys=TRIAL_TAGS[:3]),
            "tokens_per_second": Gauge(
                "sptune_tokens_per_second",
                "training tokens per second in the trial's latest epoch",
                tag_keys=TRIAL_TAGS,
            ),
            # Without the trial tag: one histogram per variant stays a handful of series.
            "epoch_seconds": Histogram(
                "sptune_epoch_seconds",
                "seconds per training epoch",
                boundaries=EPOCH_SECONDS_BUCKETS,
                tag_keys=TRIAL_TAGS[:3],
            ),
            "trials": Gauge("sptune_trials", "trials of the study in each Ray Tune state", tag_keys=STATE_TAGS),
        }
        for key, text in _EPOCH_GAUGES.items():
            found[key] = Gauge(f"sptune_{key}", text, tag_keys=TRIAL_TAGS)
        _metrics = found
    return _metrics


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def tokens_per_second(tokens_before: int, result: dict[str, Any]) -> float | None:
    """Training throughput of one epoch: the tokens it trained on (``tokens_seen`` counts every
    example x sequence length since the trial started) over its ``epoch_seconds``."""
    seconds = result.get("epoch_seconds")
    if not _finite(seconds) or seconds <= 0 or not _finite(result.get("tokens_seen")):
        return None
    return (result["tokens_seen"] - tokens_before) / seconds


def export_epoch(study: str, trial_id: str, config: dict[str, Any], result: dict[str, Any], tokens_before: int) -> None:
    """Called from a trial's step() with the epoch it returned; a diverged epoch exports nothing."""
    if result.get("diverged"):
        return
    tags = {
        "study": study,
        "variant": str(config.get("variant", "")),
        "stage": str(config.get("phase", "")),
        "trial": trial_id,
    }
    m = _get()
    m["epochs"].inc(1.0, tags=tags)
    variant_tags = {k: tags[k] for k in TRIAL_TAGS[:3]}
    if _finite(result.get("tokens_seen")) and result["tokens_seen"] > tokens_before:
        m["tokens"].inc(float(result["tokens_seen"] - tokens_before), tags=variant_tags)
    rate = tokens_per_second(tokens_before, result)
    if rate is not None:
        m["tokens_per_second"].set(rate, tags=tags)
        m["epoch_seconds"].observe(float(result["epoch_seconds"]), tags=variant_tags)
    for key in _EPOCH_GAUGES:
        if _finite(result.get(key)):
            m[key].set(float(result[key]), tags=tags)


class TrialStateMetrics(tune.Callback):
    """Driver-side: ``sptune_trials{study,variant,stage,state}``, every state of every variant of
    the Tuner (zeros included, so a panel shows a variant before its first trial starts)."""

    MIN_INTERVAL_S = 1.0  # Tune calls on_step_end many times a second; Prometheus scrapes every few

    def __init__(self, study: str, variants: list[tuple[str, str]]) -> None:
        self.study = study
        self.variants = list(variants)  # (variant, stage) of each search in the Tuner
        self._last = 0.0

    def counts(self, trials: list) -> dict[tuple[str, str, str], int]:
        """(variant, stage, state) -> trials, for every state of every known variant."""
        keys = {*self.variants, *((str(t.config.get("variant")), str(t.config.get("phase"))) for t in trials)}
        counts = {(v, s, state): 0 for v, s in keys for state in TRIAL_STATES}
        for trial in trials:
            key = (str(trial.config.get("variant")), str(trial.config.get("phase")), str(trial.status).lower())
            if key in counts:
                counts[key] += 1
        return counts

    def export(self, trials: list) -> None:
        gauge = _get()["trials"]
        for (variant, stage, state), n in self.counts(trials).items():
            gauge.set(float(n), tags={"study": self.study, "variant": variant, "stage": stage, "state": state})
        self._last = time.monotonic()

    def setup(self, **info: Any) -> None:
        self.export([])

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if time.monotonic() - self._last >= self.MIN_INTERVAL_S:
            self.export(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.export(trials)
