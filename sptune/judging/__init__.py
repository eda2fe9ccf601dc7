"""Judging a study's trials: the one ranking rule, selection, the sealed test split, statistics, pairing, results
files."""
