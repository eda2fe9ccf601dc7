"""Order-independent early stopping per stage: synchronous successive halving and Hyperband."""
