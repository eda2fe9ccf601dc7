"""A planned study, run: `launch` (Ray, the MLflow parent run, the report) and `study.Study`, whose one Tuner
(`tuner_run`) runs every search and re-run as a stage; `state` (study_state.json), `pretraining` and
`spt_reuse` (the SPT checkpoints known without trials), `final_evaluation` (the one test read), `publish`."""
