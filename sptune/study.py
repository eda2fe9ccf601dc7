"""Runs a planned study: a pretrain Tuner per objective, one finetune Tuner for all variants
(each its own search), one Tuner of seed re-runs, selection per variant,
the single test evaluation per selected checkpoint, results and tracking.

Progress is saved to ``study_state.json`` after every stage, so ``--resume`` skips
finished stages, restores an interrupted Tuner, and never re-reads the test split.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sptune import holdout, spt_cache
from sptune.checkpoints import checkpoint_dir
from sptune.evaluate import accuracy_on_test
from sptune.plan import StagePlan, StudyPlan, TunerPlan
from sptune.results import add_deltas, markdown_table, summarize, summary_table, write_results
from sptune.selection import Selection, select_best, select_each
from sptune.tasks.base import TaskSplits
from sptune.tracking import Tracker, TrialRunLogger
from sptune.tuners import build_tuner, restore_tuner

STATE_FILE = "study_state.json"


def _stage_name(sel: Selection) -> str:
    return f"seeds-{sel.variant}" if sel.stage == "seed" else f"finetune-{sel.variant}"


def _exists(path_or_uri: str) -> bool:
    import pyarrow.fs

    fs, path = pyarrow.fs.FileSystem.from_uri(
        path_or_uri if "://" in path_or_uri else Path(path_or_uri).resolve().as_uri()
    )
    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def read_state(output_dir: Path) -> dict[str, Any] | None:
    path = output_dir / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


class Study:
    def __init__(
        self,
        plan: StudyPlan,
        data: TaskSplits,
        output_dir: Path,
        tracker: Tracker,
        resume: bool = False,
        storage: str | None = None,
        spt_cache_dir: Path | None = None,
    ) -> None:
        self.plan, self.data, self.out, self.tracker = plan, data, output_dir, tracker
        self.spt_cache = spt_cache_dir
        # A local path or a URI such as s3://bucket/prefix (kept as text: Path would mangle "://").
        self.storage = storage or str((output_dir / "ray_results").resolve())
        self.resume = resume
        self.state: dict[str, Any] = read_state(output_dir) or {"stages": {}, "timeline": []}
        self.state.update(
            {
                "tracking_uri": tracker.uri,
                "experiment_id": tracker.experiment_id,
                "parent_run_id": tracker.parent_run_id,
            }
        )
        self._save_state()

    def _save_state(self) -> None:
        tmp = self.out / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2, default=str))
        tmp.replace(self.out / STATE_FILE)  # atomic: a kill never leaves half a state file

    def _static_params(self, stage: StagePlan) -> dict[str, Any]:
        s = self.plan.spec
        params = {
            "task": self._data_for(stage).info.name,
            "stage": stage.stage,
            "variant": stage.variant,
            "kind": stage.kind,
            "max_epochs": stage.epochs,
            **{f"model.{k}": v for k, v in s.model.model_dump().items()},
        }
        if stage.stage == "pretrain":
            params.update(
                {"objective": stage.variant, "mask_ratio": s.pretrain.mask_ratio, "recon_loss": s.pretrain.loss}
            )
        return params

    def _data_for(self, stage: StagePlan) -> TaskSplits:
        """spt_cross pretraining reads another task; every other stage reads the study's."""
        return self.plan.source_data.get(stage.name, self.data)

    def run_stage(self, stage: StagePlan, spt_checkpoint: str | None = None) -> Selection:
        """One stage in a Tuner of its own (pretraining)."""
        spt = {stage.variant: spt_checkpoint} if spt_checkpoint else None
        return self._run(TunerPlan(stage.name, (stage,)), spt)[stage.variant][0]

    def _finished(self, group: TunerPlan) -> dict[str, list[Selection]] | None:
        recorded = [self.state["stages"].get(st.name) for st in group.stages]
        if not all(recorded):
            return None
        print(f"[sptune] {group.name}: already finished, reusing its selections", flush=True)
        pairs = zip(group.stages, recorded, strict=True)
        return {st.variant: [Selection(**d) for d in r["selections"]] for st, r in pairs}

    def _tuner(self, group: TunerPlan, spt: dict[str, str] | None) -> Any:
        experiment_dir = f"{self.storage.rstrip('/')}/{group.name}"
        data = self._data_for(group.stages[0])
        if self.resume and _exists(f"{experiment_dir}/tuner.pkl"):
            print(f"[sptune] {group.name}: resuming the interrupted Tuner ...", flush=True)
            return restore_tuner(experiment_dir, self.plan, group, data, spt)
        logger = TrialRunLogger(self.tracker, {st.variant: self._static_params(st) for st in group.stages})
        parts = ", ".join(f"{st.variant} {st.n_trials} ({st.searcher})" for st in group.stages)
        print(f"[sptune] {group.name}: {group.n_trials} trials: {parts} ...", flush=True)
        return build_tuner(self.plan, group, data, self.storage, [logger], spt)

    def _run(self, group: TunerPlan, spt: dict[str, str] | None, each: bool = False) -> dict[str, list[Selection]]:
        """Run (or resume, or reuse) one Tuner; select per variant; record it all in the state."""
        done = self._finished(group)
        if done is not None:
            return done
        start = time.time()
        grid = self._tuner(group, spt).fit()
        runs = self.tracker.children()
        picked: dict[str, list[Selection]] = {}
        for stage in group.stages:
            results = [r for r in grid if (r.config or {}).get("variant") == stage.variant]
            picked[stage.variant] = select_each(results, stage) if each else [select_best(results, stage)]
        for stage in group.stages:
            selections = picked[stage.variant]
            run_ids = [runs.get(sel.trial_id) for sel in selections]
            for run_id, sel in zip(run_ids, selections, strict=True):
                self._mark_selected(run_id, sel)
            self.state["stages"][stage.name] = {"selections": [asdict(s) for s in selections], "run_ids": run_ids}
            self._print_selections(stage, selections, start)
        self.state["timeline"].append(
            {"stage": group.name, "variants": [st.variant for st in group.stages], "start": start,
             "end": time.time(), "trials": len(grid)}
        )
        self._save_state()
        return picked

    @staticmethod
    def _print_selections(stage: StagePlan, selections: list[Selection], start: float) -> None:
        for sel in selections:
            print(
                f"[sptune] {stage.name}: best {sel.metric}={sel.score:.4f} at epoch {sel.epoch} "
                f"(lr={sel.config['lr']:.3g}, batch={sel.config['batch_size']}, seed={sel.config.get('seed')}) "
                f"after {time.time() - start:.0f}s",
                flush=True,
            )

    def _mark_selected(self, run_id: str | None, sel: Selection) -> None:
        if run_id is None:
            return
        client = self.tracker.client
        client.set_tag(run_id, "sptune.selected", "true")
        client.log_metric(run_id, "selected_epoch", sel.epoch)
        client.log_artifacts(run_id, sel.checkpoint_path, artifact_path="selected_checkpoint")

    def run(self) -> list[dict[str, Any]]:
        if self.state.get("rows") is not None:
            print("[sptune] study already finished; nothing to do", flush=True)
            return self.state["rows"]
        # Each pretraining objective runs once; every variant and seed that needs it reuses it.
        checkpoints = {st.name: self._pretrained(st) for st in self.plan.pretrain_stages()}
        searches = self.plan.finetune_stages()
        spt = {st.variant: checkpoints[st.pretrain_stage] for st in searches if st.pretrain_stage}
        best = self._run(TunerPlan("finetune", tuple(searches)), spt)
        if self.plan.spec.rerun_seeds > 1:
            reruns = tuple(self._seed_rerun(st, best[st.variant][0]) for st in searches)
            chosen = self._run(TunerPlan("seeds", reruns), spt, each=True)
        else:
            chosen = best
        selections = [(st, sel) for st in searches for sel in chosen[st.variant]]
        rows = self.final_evaluation(selections)
        self.state["rows"] = rows
        self._save_state()
        self._write(rows)
        return rows

    def _pretrained(self, stage: StagePlan) -> str:
        if stage.reuse_checkpoint:
            print(f"[sptune] {stage.name}: reusing {stage.reuse_checkpoint}", flush=True)
            return str(checkpoint_dir(stage.reuse_checkpoint))
        if stage.epochs == 0:
            return str(self._untrained_checkpoint(stage))
        if self.spt_cache is None:
            return self.run_stage(stage).checkpoint_path
        key = spt_cache.cache_key(self.plan.spec, stage)
        cached = spt_cache.lookup(self.spt_cache, key)
        if cached is not None and stage.name not in self.state["stages"]:
            print(f"[sptune] {stage.name}: same pretraining as an earlier study, reusing {cached}", flush=True)
            self.state["spt_reused"] = {**self.state.get("spt_reused", {}), stage.name: str(cached)}
            self._save_state()
            return str(cached)
        return str(spt_cache.store(self.spt_cache, key, self.run_stage(stage).checkpoint_path))

    def _untrained_checkpoint(self, stage: StagePlan) -> Path:
        """Zero SPT epochs (the origin of an SPT-budget axis): a seeded, untrained encoder."""
        import torch

        from sptune.build import encoder_config
        from sptune.checkpoints import STATE_FILE
        from sptune.models import Pretrainer

        folder = self.out / f"{stage.name}-0-epochs"
        folder.mkdir(exist_ok=True)
        torch.manual_seed(self.plan.spec.seed)
        model = Pretrainer(encoder_config(self.plan.spec.model, self._data_for(stage).info), 1)
        torch.save({"model": model.state_dict()}, folder / STATE_FILE)
        print(f"[sptune] {stage.name}: 0 epochs, SPT variants start from an untrained encoder", flush=True)
        return folder

    def _seed_rerun(self, st: StagePlan, best: Selection) -> StagePlan:
        """The variant's selected config, re-trained with N seeds to the end (no early stopping)."""
        seeds = [self.plan.spec.seed + i for i in range(self.plan.spec.rerun_seeds)]
        configs = tuple({"lr": best.config["lr"], "batch_size": best.config["batch_size"], "seed": s} for s in seeds)
        return replace(st, stage="seed", num_samples=1, searcher="grid", fixed_configs=configs)

    def final_evaluation(self, selections: list[tuple[StagePlan, Selection]]) -> list[dict[str, Any]]:
        """The only place the test split is read: once per selected checkpoint."""
        rows = []
        with holdout.final_evaluation(self.out / "test_reads.jsonl"):
            for stage, sel in selections:
                test = self.data.test
                loss, acc = accuracy_on_test(self.plan.spec, self.plan.info, sel.checkpoint_path, test, sel.variant)
                rows.append(self._row(stage, sel, loss, acc))
        add_deltas(rows)
        for row in rows:
            if row["mlflow_run_id"]:
                self.tracker.client.log_metric(row["mlflow_run_id"], "test_acc", row["test_acc"])
                self.tracker.client.log_metric(row["mlflow_run_id"], "test_loss", row["test_loss"])
        return rows

    def _row(self, stage: StagePlan, sel: Selection, test_loss: float, test_acc: float) -> dict[str, Any]:
        search = self.state["stages"][stage.name]["selections"][0]
        recorded = self.state["stages"][_stage_name(sel)]
        run_id = recorded["run_ids"][[s["trial_id"] for s in recorded["selections"]].index(sel.trial_id)]
        return {
            "variant": sel.variant,
            "kind": stage.kind,
            "task": self.plan.info.name,
            "seed": int(sel.config.get("seed", self.plan.spec.seed)),
            "lr": float(sel.config["lr"]),
            "batch_size": int(sel.config["batch_size"]),
            "best_epoch": sel.epoch,
            "val_acc": sel.score,
            "test_acc": test_acc,
            "test_loss": test_loss,
            # Search statistics describe the variant's LR/batch search, shared by its seeds.
            "trials": search["n_trials"],
            "diverged": search["n_diverged"],
            "failed": search["n_failed"],
            "trial_epochs": search["trial_epochs"],
            "trial_id": sel.trial_id,
            "mlflow_run_id": run_id,
            "checkpoint": sel.checkpoint_path,
        }

    def _write(self, rows: list[dict[str, Any]]) -> None:
        study = {
            "study": self.plan.spec.name,
            "task": self.plan.info.name,
            "mlflow": {
                "tracking_uri": self.tracker.uri,
                "experiment_id": self.tracker.experiment_id,
                "parent_run_id": self.tracker.parent_run_id,
            },
            "timeline": self.state["timeline"],
        }
        for st in self.plan.pretrain_stages():
            done = self.state["stages"].get(st.name)
            if done:  # absent when a given or cached checkpoint replaced the stage
                study[st.name] = {k: v for k, v in done["selections"][0].items() if k != "metrics"}
            elif st.epochs == 0:
                study[st.name] = {"epochs": 0}
            else:
                study[st.name] = {"reused_checkpoint": st.reuse_checkpoint or self.state["spt_reused"][st.name]}
        study["summary"] = summarize(rows)
        json_path, md_path = write_results(self.out, study, rows)
        parent = self.tracker.parent_run_id
        for variant, stats in study["summary"].items():
            self.tracker.client.log_metric(parent, f"test_acc.{variant}", stats["test_acc_mean"])
        self.tracker.client.log_artifact(parent, str(json_path))
        self.tracker.client.log_artifact(parent, str(md_path))
        print("\n" + markdown_table(rows) + "\n\n" + summary_table(study["summary"]) + "\n", flush=True)
