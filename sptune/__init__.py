"""sptune: fair hyperparameter sweeps for self-pretraining studies on Ray Tune."""

__version__ = "0.1.0"
