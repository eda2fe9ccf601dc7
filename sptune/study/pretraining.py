"""The SPT checkpoints a study's pretrainings give without trials: a given checkpoint, an untrained
encoder (0 epochs), the campaign's cached checkpoint, or what an earlier run of this study selected.
Every other pretraining is a stage of the study's one Tuner (`sptune.tuning.stages`), cached once selected.
Under a remote --storage the first three are copied under it before trials are handed them: they are
files on the driver's machine, which trials on other nodes cannot open."""

from __future__ import annotations

from pathlib import Path

import torch

from sptune import storage
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.study import spt_reuse
from sptune.study.state import StateFile
from sptune.tasks.base import TaskSplits
from sptune.training.checkpoint_files import STATE_FILE, checkpoint_dir
from sptune.training.model_configs import encoder_config
from sptune.training.models import Pretrainer


class PretrainedWithoutTrials:
    """The SPT checkpoints a study's pretrainings give without trials (given, untrained, cached, selected before),
    and the campaign's cache of those selected by trials; each objective is pretrained once per study."""

    def __init__(
        self, plan: StudyPlan, data: TaskSplits, output_dir: Path, state_file: StateFile, cache_dir: Path | None,
        remote_storage: str | None = None,
    ) -> None:
        self.plan, self.data, self.out = plan, data, output_dir
        self.state_file, self.cache_dir = state_file, cache_dir
        self.remote_storage = remote_storage  # where trials on any node can read what the driver wrote

    def given(self, pretraining: SearchPlan) -> str | None:
        """The checkpoint variants initialised from this pretraining start from, when it needs no trials
        (or this study selected it before); None: it is a stage of the Tuner."""
        label, state = pretraining.label, self.state_file.state
        if pretraining.reuse_checkpoint:
            print(f"[sptune] {label}: reusing {pretraining.reuse_checkpoint}", flush=True)
            return self._for_trials(checkpoint_dir(pretraining.reuse_checkpoint), f"{label}-given")
        if pretraining.epochs == 0:
            return self._for_trials(self._untrained(pretraining))
        if label in state.searches:  # selected by an earlier run of this study (resumed)
            return state.searches[label].best.selection.checkpoint_path
        # Re-pretraining needs the selected config, which only this study's own state records.
        if self.cache_dir is None or self.plan.spec.rerun_pretrain:
            return None
        cached = spt_reuse.lookup(self.cache_dir, spt_reuse.cache_key(self.plan.spec, pretraining))
        if cached is None:
            return None
        print(f"[sptune] {label}: same pretraining as an earlier study, reusing {cached}", flush=True)
        state.spt_from_cache[label] = str(cached)
        self.state_file.save()
        return self._for_trials(cached, f"{label}-cached-{cached.name}")

    def given_per_seed(self, pretraining: SearchPlan) -> dict[int, str] | None:
        """rerun_pretrain: re-run seed -> the checkpoint that seed's SPT re-runs start from, when it needs
        no trials (0 epochs: an untrained encoder per seed; a given checkpoint; re-pretrained before);
        None: the selected pretraining config re-pretrained per seed is a stage of the Tuner."""
        seeds = self.plan.rerun_seeds()
        if pretraining.epochs == 0:
            return {seed: self._for_trials(self._untrained(pretraining, seed)) for seed in seeds}
        if pretraining.reuse_checkpoint:  # nothing to re-pretrain: every seed starts from the given one
            given = checkpoint_dir(pretraining.reuse_checkpoint)
            return dict.fromkeys(seeds, self._for_trials(given, f"{pretraining.label}-given"))
        record = self.state_file.state.searches.get(pretraining.rerun_label)
        if record is None:
            return None
        return {int(s.selection.config["seed"]): s.selection.checkpoint_path for s in record.selected}

    def cache(self, pretraining: SearchPlan) -> None:
        """Keep this study's selected SPT checkpoint for later studies of the campaign with the same
        pretraining setup."""
        label, state = pretraining.label, self.state_file.state
        if self.cache_dir is None or self.plan.spec.rerun_pretrain or label in state.spt_from_cache:
            return
        if label in state.searches:
            key = spt_reuse.cache_key(self.plan.spec, pretraining)
            spt_reuse.store(self.cache_dir, key, state.searches[label].best.selection.checkpoint_path)

    def _for_trials(self, folder: Path, name: str | None = None) -> str:
        """How trials are to name a checkpoint folder of the driver's: itself, or under a remote storage
        its copy at STORAGE/spt/NAME (written once: a resumed study finds it there)."""
        if self.remote_storage is None:
            return str(folder)
        uri = storage.join(self.remote_storage, "spt", name or folder.name)
        target = storage.join(uri, STATE_FILE)
        if not storage.exists(target):
            storage.write_atomically(target, (folder / STATE_FILE).read_bytes())
        return uri

    def _untrained(self, pretraining: SearchPlan, seed: int | None = None) -> Path:
        """Zero SPT epochs (the origin of an SPT-budget axis): a seeded, untrained encoder (the spec's seed,
        or a re-run's)."""
        folder = self.out / (f"{pretraining.label}-0-epochs" + (f"-seed{seed}" if seed is not None else ""))
        folder.mkdir(exist_ok=True)
        torch.manual_seed(self.plan.spec.seed if seed is None else seed)
        info = self.plan.training_data(pretraining, self.data).info
        model = Pretrainer(encoder_config(self.plan.spec.model, info), 1)
        torch.save({"model": model.state_dict()}, folder / STATE_FILE)
        print(f"[sptune] {pretraining.label}: 0 epochs, SPT variants start from an untrained encoder", flush=True)
        return folder
