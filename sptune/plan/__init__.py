"""The study plan: which searches a study runs, their rungs, seeds and cost."""
