"""What a study records: MLflow runs, Optuna studies, their SQLite templates, provenance."""
