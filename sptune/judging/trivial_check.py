"""Whether a selected SPT checkpoint beats the predictors that need no training (sptune.training.trivial_scores),
on the validation masks it was selected on: results.json's ``versus_trivial`` of each pretraining."""

from __future__ import annotations

from typing import Any

TRIVIAL_PREFIX = "trivial_"
TRIVIAL_BEST = "trivial_best"


def versus_trivial(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint's validation score beside each trivial predictor's, in the unit the objective is judged by
    (loss for l1/l2, masked accuracy for ce), and whether it beats the best of them; None for metrics without
    trivial scores (pretrainings from before they existed)."""
    trivial = {k: float(v) for k, v in metrics.items() if k.startswith(TRIVIAL_PREFIX)}
    if TRIVIAL_BEST not in trivial:
        return None
    by_loss = any(k.endswith("_loss") for k in trivial)
    own = metrics.get("val_loss" if by_loss else "val_masked_acc")
    if own is None:
        return None
    own, best = float(own), trivial[TRIVIAL_BEST]
    beats = own < best if by_loss else own > best
    # Relative: 0.10 is a loss 10 % below the best trivial one (or an accuracy 10 % above it).
    margin = (best - own) / best if by_loss else (own - best) / best if best else None
    return {"unit": "val_loss" if by_loss else "val_masked_acc", "spt": own, **trivial,
            "beats_trivial": beats, "relative_margin": margin}


def describe(label: str, check: dict[str, Any]) -> str:
    """One pretraining's comparison in words (results.md and the report's flag)."""
    unit, own = check["unit"], check["spt"]
    named = ", ".join(f"{k.removeprefix(TRIVIAL_PREFIX)} {v:.4f}" for k, v in check.items()
                      if k.startswith(TRIVIAL_PREFIX) and k != TRIVIAL_BEST)
    verdict = ("beats the best of them" if check["beats_trivial"] else
               "does NOT beat the best of them: SPT learned less than a predictor that needs no training, so the "
               "finetuning comparison tests an untrained prior")
    return f"{label}: selected checkpoint {unit} {own:.4f}; trivial predictors on the same masks: {named}; {verdict}."


def trivial_checks(study: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """results.json's pretraining label -> its selected checkpoint's `versus_trivial`."""
    return {label: entry["versus_trivial"] for label, entry in study.items()
            if isinstance(entry, dict) and isinstance(entry.get("versus_trivial"), dict)}


def trivial_lines(study: dict[str, Any]) -> list[str]:
    """results.md's account of each pretraining's selected checkpoint against the trivial predictors."""
    checks = list(trivial_checks(study).items())
    if not checks:
        return []
    return ["", "SPT checkpoints against predictors that need no training (validation, pixel units for pixels):",
            *(f"- {describe(label, check)}" for label, check in checks)]
