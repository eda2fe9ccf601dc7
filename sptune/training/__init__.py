"""Pure-PyTorch training: loops, objectives, variants, models, devices, checkpoint files. No Ray, no MLflow."""
