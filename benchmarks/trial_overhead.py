"""sptune finetune trial vs a minimal plain-PyTorch loop: same model, data, threads.

Both run the same number of epochs (train + per-epoch validation) at the same LR and
batch size, alternating A/B/A/B so machine noise hits both. Prints tokens/s of each
and their ratio; writes JSON (`ratio` = sptune tokens/s / plain tokens/s).

    python benchmarks/trial_overhead.py --json benchmarks/results/trial_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from sptune.spec import SweepSpec, from_dict, load_spec
from sptune.tasks import TaskRequest, load_task
from sptune.tasks.registry import resolve_data_dir
from sptune.training import objectives as obj
from sptune.training.model_configs import classifier_config
from sptune.training.models import Classifier

REPO = Path(__file__).resolve().parent.parent


def plain_loop(spec, data, lr: float, batch: int, epochs: int, threads: int) -> float:
    """What a researcher writes by hand: AdamW, shuffled batches, val accuracy each epoch."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    info = data.info
    model = Classifier(classifier_config(spec.model, info))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    x, y = torch.from_numpy(data.train.x), torch.from_numpy(data.train.y).long()
    vx, vy = torch.from_numpy(data.val.x), torch.from_numpy(data.val.y).long()
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(y)).split(batch):
            loss = torch.nn.functional.cross_entropy(model(obj.model_inputs(x[idx], info)), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(obj.model_inputs(a, info)).argmax(-1) == b).sum())
                          for a, b in zip(vx.split(256), vy.split(256), strict=True))
        _ = correct / len(vy)
    return time.perf_counter() - start


def one_trial_spec(spec: SweepSpec, lr: float, batch: int, epochs: int) -> SweepSpec:
    """The spec cut to one scratch finetuning trial at ``lr`` and ``batch`` for ``epochs`` epochs, FIFO."""
    data = spec.model_dump(mode="json", exclude={"pretrain"})
    grid = {"lr": {"type": "grid", "values": [lr]}, "batch_size": {"type": "choice", "values": [batch]}}
    data["variants"] = {"scratch": {"kind": "scratch", "num_samples": 1, "epochs": epochs, "search": grid}}
    data.update(rerun_seeds=1, scheduler={"type": "fifo"})
    data["resources"] = {**data["resources"], "max_concurrent": 1}
    data.pop("selection")  # the defaults: digits_quick picks among candidates this one trial cannot offer
    return from_dict(data)


def sptune_trial(spec: SweepSpec, data, storage: Path) -> tuple[float, float]:
    """One finetuning trial through the study's own Tuner (its plan, searcher, scheduler and StudyTrainable):
    (in-trial seconds, fit() seconds)."""
    from sptune.judging.stage_graph import Stage
    from sptune.plan.study_plan import build_plan
    from sptune.tuning.tuner import build_study_tuner, staged_search

    plan = build_plan(spec, data.info, cluster_cpus=2)
    search = plan.variant_searches()[0]
    searcher, scheduler = staged_search(plan, [Stage(search)], {}, {})
    tuner = build_study_tuner(plan, data, searcher, scheduler, str(storage), [])
    start = time.perf_counter()
    result = tuner.fit()[0]
    if result.error is not None:
        raise RuntimeError(f"the sptune trial failed: {result.error}")
    return float(result.metrics["time_total_s"]), time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(REPO / "search_spaces" / "digits_quick.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--data-dir")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    import ray

    spec = load_spec(args.spec, args.overrides)
    trial_spec = one_trial_spec(spec, args.lr, args.batch, args.epochs)
    data = load_task(TaskRequest(spec.task.name, spec.task.options, spec.seed, resolve_data_dir(args.data_dir)))
    threads = max(1, int(spec.resources.cpu))
    tokens = len(data.train) * data.info.seq_len * args.epochs
    ray.init(num_cpus=max(2, threads), include_dashboard=False, log_to_driver=False)
    plain_s, trial_s, fit_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):  # alternate so drift affects both sides alike
            plain_s.append(plain_loop(spec, data, args.lr, args.batch, args.epochs, threads))
            inside, whole = sptune_trial(trial_spec, data, Path(tmp) / f"r{i}")
            trial_s.append(inside)
            fit_s.append(whole)
    ray.shutdown()
    plain_tps = tokens / statistics.median(plain_s)
    trial_tps = tokens / statistics.median(trial_s)
    fit_tps = tokens / statistics.median(fit_s)
    out = {
        "task": data.info.name, "seq_len": data.info.seq_len, "train_rows": len(data.train),
        "epochs": args.epochs, "threads": threads, "batch_size": args.batch, "repeats": args.repeats,
        "plain_seconds": plain_s, "trial_seconds": trial_s, "fit_seconds": fit_s,
        "plain_tokens_per_s": plain_tps, "sptune_tokens_per_s": trial_tps, "sptune_fit_tokens_per_s": fit_tps,
        "ratio": trial_tps / plain_tps, "ratio_including_actor_start": fit_tps / plain_tps,
        "torch": torch.__version__, "python": sys.version.split()[0],
    }
    print(f"{'run':<34}{'tokens/s':>12}{'ratio':>8}")
    print(f"{'plain PyTorch loop':<34}{plain_tps:>12.0f}{1.0:>8.3f}")
    print(f"{'sptune trial (in-trial time)':<34}{trial_tps:>12.0f}{out['ratio']:>8.3f}")
    print(f"{'sptune trial (whole Tuner.fit)':<34}{fit_tps:>12.0f}{out['ratio_including_actor_start']:>8.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
