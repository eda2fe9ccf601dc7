"""The study's fixed rules, as pure functions and constants: how long a trial trains (`budgets`), which seed
each training uses (`seeds`), where early stopping's rungs fall (`rungs`), how an LR range is extended
(`lr_extension`) and which of two epochs or trials is better (`ranking`).

Stdlib only, importing nothing of sptune: the spec validates with them, the plan computes with them, and
judging, tuning and training apply them, so every package reads one rule and none imports another to get it.
"""
