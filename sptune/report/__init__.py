"""Fairness report for a finished study: ``python -m sptune.report RUN_DIR_OR_MLFLOW_RUN``.

Reads results.json (the contract) and the study's MLflow child runs through ``MlflowClient`` in this
(driver) process, and writes a self-contained ``report.html`` (inline CSS and SVG, no scripts, no network),
its figures as SVG, PDF and PNG in ``figures/``, and ``report.md`` and ``results.csv`` next to it
(``results.md`` is the study's own; the report never rewrites it). With an MLflow parent run, the figures and
the page are logged to it (``figures/``, ``report/``). The fairness flags: a best LR on the edge of its search,
rankings that flip across LRs, unequal completed trials, divergence, and compute spent per variant (SPT
pretraining attributed to the variants initialised from it).

Modules, in the order the data flows: ``gather`` (with ``mlflow_runs``) reads a study into the ``records``;
``cells`` aggregates seeds with ``sptune.judging.stats`` (the statistics results.json uses too); ``lr_search`` and
``compute`` feed the ``flags``; ``figures`` draws with matplotlib (``plots/``), ``page`` computes the values its
Jinja2 template (``template/``, package data) shows and renders it, ``tables`` writes report.md and results.csv;
``assemble`` runs it all and logs the files to the parent run; ``__main__`` is the command line.
"""

from sptune.report.assemble import build_report

__all__ = ["build_report"]
