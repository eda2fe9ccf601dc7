"""The names of what a study writes into its output directory (``OUTPUT/``), each with why it is there.

One module owns them so the writer, ``--resume``, the remote-storage copy, the report and the results
page (tools/) cannot drift apart. Imports nothing: every layer may read it.
"""

from __future__ import annotations

SPEC = "spec.yaml"  # the resolved spec: --resume refuses another one; the report reads the search spaces
STATE = "study_state.json"  # each stage's selection, saved as it is made: what --resume restores
OPTUNA_RECORD = "optuna.json"  # where the Optuna studies are (no password) and whose each is
OPTUNA_DB = "optuna.db"  # the default Optuna database (none with --optuna-storage)
MLFLOW_DB = "mlflow.db"  # the default MLflow tracking store (none with --tracking-uri)
TEST_READS = "test_reads.jsonl"  # every read of the sealed test split: the audit that it was read once
RESULTS_JSON = "results.json"  # the study's (or campaign's) rows and summary: what the report reads
RESULTS_MD = "results.md"  # the same results as tables for a person
REPORT_HTML = "report.html"  # the self-contained fairness report
REPORT_MD = "report.md"  # the report's tables in Markdown
FLAGS_JSON = "flags.json"  # the report's fairness flags, for `sptune.load_results` and scripts
RESULTS_CSV = "results.csv"  # one row per variant and task, for further analysis
FIGURES = "figures"  # the report's figures (SVG, PDF, PNG)
RAY_RESULTS = "ray_results"  # Tune's experiment and checkpoints when --storage is not given
SPT_CACHE = "spt_cache"  # a campaign's SPT checkpoints, shared by its studies (in the campaign's directory)

# The driver's files a remote --storage keeps as they are written, so --resume works from the storage alone.
DRIVER_FILES = (STATE, SPEC, OPTUNA_RECORD, TEST_READS)
# What a finished study adds (copied under a remote --storage at the end).
RESULT_FILES = (RESULTS_JSON, RESULTS_MD, REPORT_HTML)
