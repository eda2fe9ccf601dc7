"""The report's figures, drawn with matplotlib on ``Figure`` objects with an explicit Agg canvas (never pyplot,
so no global state leaks between figures or into a user's session).

Imported only when a report is built (``sptune.report.assemble`` imports ``figures`` then), so that a study's
start never waits for matplotlib.

``canvas`` holds what every figure shares (palette, sizes, saving as SVG/PDF/PNG, the inline SVG); one module
per figure: ``lr`` (accuracy vs learning rate), ``curves`` (learning curves), ``survival`` (early-stopping
survival per rung), ``delta`` (Δ vs the paired variant with its interval), ``importances`` (Optuna's
hyperparameter importances).
"""
