"""Ray Tune: the study's one Tuner, its stages, searchers, schedulers, trainable and callbacks."""
