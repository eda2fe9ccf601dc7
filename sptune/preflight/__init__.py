"""Everything checked before anything starts, in one place.

`prepare(options)` turns what the command line asked for into a ready, fully resolved study
(or campaign of studies): the validated spec, its task's data, the plan, the output
directory and resume state, the tracking target and the cluster. Anything wrong becomes one
`SptuneError` paragraph naming the field or file and the fix, before Ray starts, before an
MLflow run exists and before the output directory is written.
"""

from sptune.preflight.options import RunOptions
from sptune.preflight.ready import DryRun, StudyInputs, dry_run, prepare, prepare_inputs

__all__ = ["DryRun", "RunOptions", "StudyInputs", "dry_run", "prepare", "prepare_inputs"]
