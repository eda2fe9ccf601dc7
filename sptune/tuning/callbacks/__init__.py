"""Driver-side Tune callbacks and trial-side reporting: checkpoint pruning, the terminal, live metrics, Tune's files."""
