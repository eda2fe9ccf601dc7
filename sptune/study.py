"""Runs a planned study: pretrain Tuner, one finetune Tuner per variant, selection,
the single test evaluation per selected checkpoint, results and tracking.

Progress is saved to ``study_state.json`` after every stage, so ``--resume`` skips
finished stages, restores an interrupted Tuner, and never re-reads the test split.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sptune import test_guard
from sptune.evaluate import test_accuracy
from sptune.plan import StagePlan, StudyPlan
from sptune.results import add_deltas, markdown_table, write_results
from sptune.selection import Selection, select_best
from sptune.tasks.base import TaskSplits
from sptune.tracking import Tracker, TrialRunLogger
from sptune.tuners import build_tuner, restore_tuner

STATE_FILE = "study_state.json"


def _exists(path_or_uri: str) -> bool:
    import pyarrow.fs

    fs, path = pyarrow.fs.FileSystem.from_uri(path_or_uri if "://" in path_or_uri else Path(path_or_uri).resolve().as_uri())
    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def read_state(output_dir: Path) -> dict[str, Any] | None:
    path = output_dir / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


class Study:
    def __init__(self, plan: StudyPlan, data: TaskSplits, output_dir: Path, tracker: Tracker,
                 resume: bool = False, storage: str | None = None) -> None:
        self.plan, self.data, self.out, self.tracker = plan, data, output_dir, tracker
        # A local path or a URI such as s3://bucket/prefix (kept as text: Path would mangle "://").
        self.storage = storage or str((output_dir / "ray_results").resolve())
        self.resume = resume
        self.state: dict[str, Any] = read_state(output_dir) or {"stages": {}, "timeline": []}
        self.state.update({"tracking_uri": tracker.uri, "experiment_id": tracker.experiment_id,
                           "parent_run_id": tracker.parent_run_id})
        self._save_state()

    def _save_state(self) -> None:
        tmp = self.out / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2, default=str))
        tmp.replace(self.out / STATE_FILE)  # atomic: a kill never leaves half a state file

    def _static_params(self, stage: StagePlan) -> dict[str, Any]:
        s = self.plan.spec
        params = {"task": self.plan.info.name, "stage": stage.stage, "variant": stage.variant, "kind": stage.kind,
                  "max_epochs": stage.epochs, **{f"model.{k}": v for k, v in s.model.model_dump().items()}}
        if stage.stage == "pretrain":
            params.update({"objective": s.pretrain.objective, "mask_ratio": s.pretrain.mask_ratio,
                           "recon_loss": s.pretrain.loss})
        return params

    def run_stage(self, stage: StagePlan, spt_checkpoint: str | None = None) -> Selection:
        done = self.state["stages"].get(stage.name)
        if done:
            print(f"[sptune] {stage.name}: already finished, reusing its selection", flush=True)
            return Selection(**done["selection"])
        experiment_dir = f"{self.storage.rstrip('/')}/{stage.name}"
        start = time.time()
        if self.resume and _exists(f"{experiment_dir}/tuner.pkl"):
            print(f"[sptune] {stage.name}: resuming the interrupted Tuner ...", flush=True)
            tuner = restore_tuner(experiment_dir, self.plan, stage, self.data, spt_checkpoint)
        else:
            logger = TrialRunLogger(self.tracker, stage.stage, stage.variant, self._static_params(stage))
            tuner = build_tuner(self.plan, stage, self.data, self.storage, [logger], spt_checkpoint)
            print(f"[sptune] {stage.name}: {stage.n_trials} trials ({stage.searcher}) ...", flush=True)
        grid = tuner.fit()
        selection = select_best(grid, stage)
        run_id = self.tracker.children().get(selection.trial_id)
        self._mark_selected(run_id, selection)
        self.state["timeline"].append({"stage": stage.name, "start": start, "end": time.time(), "trials": len(grid)})
        self.state["stages"][stage.name] = {"selection": asdict(selection), "run_id": run_id}
        self._save_state()
        print(f"[sptune] {stage.name}: best {selection.metric}={selection.score:.4f} at epoch {selection.epoch} "
              f"(lr={selection.config['lr']:.3g}, batch={selection.config['batch_size']}) "
              f"in {time.time() - start:.0f}s", flush=True)
        return selection

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
        spt_checkpoint = None
        pretrain = self.plan.pretrain_stage()
        if pretrain is not None:
            spt_checkpoint = self.run_stage(pretrain).checkpoint_path
        selections = [self.run_stage(st, spt_checkpoint if st.kind != "scratch" else None)
                      for st in self.plan.finetune_stages()]
        rows = self.final_evaluation(selections)
        self.state["rows"] = rows
        self._save_state()
        self._write(rows)
        return rows

    def final_evaluation(self, selections: list[Selection]) -> list[dict[str, Any]]:
        """The only place the test split is read: once per selected checkpoint."""
        rows = []
        with test_guard.final_evaluation(self.out / "test_reads.jsonl"):
            for sel in selections:
                test = self.data.test
                loss, acc = test_accuracy(self.plan.spec, self.plan.info, sel.checkpoint_path, test)
                rows.append(self._row(sel, loss, acc))
        add_deltas(rows)
        for row in rows:
            if row["mlflow_run_id"]:
                self.tracker.client.log_metric(row["mlflow_run_id"], "test_acc", row["test_acc"])
                self.tracker.client.log_metric(row["mlflow_run_id"], "test_loss", row["test_loss"])
        return rows

    def _row(self, sel: Selection, test_loss: float, test_acc: float) -> dict[str, Any]:
        stage = next(s for s in self.plan.finetune_stages() if s.variant == sel.variant)
        return {
            "variant": sel.variant, "kind": stage.kind, "task": self.plan.info.name, "seed": self.plan.spec.seed,
            "lr": float(sel.config["lr"]), "batch_size": int(sel.config["batch_size"]),
            "best_epoch": sel.epoch, "val_acc": sel.score, "test_acc": test_acc, "test_loss": test_loss,
            "trials": sel.n_trials, "diverged": sel.n_diverged, "failed": sel.n_failed,
            "trial_epochs": sel.trial_epochs, "trial_id": sel.trial_id,
            "mlflow_run_id": self.state["stages"][stage.name]["run_id"], "checkpoint": sel.checkpoint_path,
        }

    def _write(self, rows: list[dict[str, Any]]) -> None:
        study = {"study": self.plan.spec.name, "task": self.plan.info.name,
                 "mlflow": {"tracking_uri": self.tracker.uri, "experiment_id": self.tracker.experiment_id,
                            "parent_run_id": self.tracker.parent_run_id},
                 "timeline": self.state["timeline"]}
        pretrain = self.plan.pretrain_stage()
        if pretrain is not None:
            study["pretrain"] = {k: v for k, v in self.state["stages"][pretrain.name]["selection"].items()
                                 if k != "metrics"}
        json_path, md_path = write_results(self.out, study, rows)
        parent = self.tracker.parent_run_id
        for row in rows:
            self.tracker.client.log_metric(parent, f"test_acc.{row['variant']}", row["test_acc"])
            self.tracker.client.log_metric(parent, f"val_acc.{row['variant']}", row["val_acc"])
        self.tracker.client.log_artifact(parent, str(json_path))
        self.tracker.client.log_artifact(parent, str(md_path))
        print("\n" + markdown_table(rows) + "\n", flush=True)
