"""The Python API: `run` a study, `plan` it (the dry run as data), `load_results` of a finished one. The command
line (`sptune.sweep`) is a layer over these; `sptune` exports them lazily.

Modules: arguments (a spec and keywords -> RunOptions), planning (the dry run as data), study_result (the
StudyResult values), loading (a study's folder -> StudyResult), running (run and plan).
"""
