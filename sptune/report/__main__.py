"""``python -m sptune.report RUN_DIR_OR_MLFLOW_RUN`` (see sptune.report.cli)."""

import sys

from sptune.report.cli import main

sys.exit(main())
