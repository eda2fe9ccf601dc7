"""Packed trials in Ray (docs/design/tuning.md, "Packed trials"): one Tune trial per member, one executor per pack."""
