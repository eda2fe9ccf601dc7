"""Studies as Ray jobs on a shared cluster: `python -m sptune.jobs` (see docs/cluster.md).

`staging` checks a spec here and stages the files its job carries (no Ray); `service` is a thin
layer over Ray's job server; `__main__` is the command line.
"""
