"""The SPT checkpoint of each pretraining objective: a given checkpoint, an untrained encoder
(0 epochs), the campaign's cached checkpoint, or the selection of its own pretraining Tuner."""

from __future__ import annotations

from pathlib import Path

from sptune import spt_cache
from sptune.checkpoints import checkpoint_dir
from sptune.plan import SearchPlan, StudyPlan, TunerPlan
from sptune.study.state import StateFile
from sptune.study.tuner_run import TunerRunner
from sptune.tasks.base import TaskSplits


class SptCheckpoints:
    """Where each pretraining's SPT checkpoint comes from; each objective is pretrained once per study."""

    def __init__(
        self,
        plan: StudyPlan,
        data: TaskSplits,
        output_dir: Path,
        tuners: TunerRunner,
        state_file: StateFile,
        cache_dir: Path | None,
    ) -> None:
        self.plan, self.data, self.out, self.tuners = plan, data, output_dir, tuners
        self.state_file, self.cache_dir = state_file, cache_dir

    def checkpoint(self, pretraining: SearchPlan) -> str:
        """The directory of the SPT checkpoint that variants initialised from this pretraining start from."""
        label = pretraining.label
        if pretraining.reuse_checkpoint:
            print(f"[sptune] {label}: reusing {pretraining.reuse_checkpoint}", flush=True)
            return str(checkpoint_dir(pretraining.reuse_checkpoint))
        if pretraining.epochs == 0:
            return str(self._untrained(pretraining))
        if self.cache_dir is None:
            return self._pretrain(pretraining)
        key = spt_cache.cache_key(self.plan.spec, pretraining)
        cached = spt_cache.lookup(self.cache_dir, key)
        # A pretraining this study finished itself is reused from the state, not the cache.
        if cached is not None and label not in self.state_file.state.searches:
            print(f"[sptune] {label}: same pretraining as an earlier study, reusing {cached}", flush=True)
            self.state_file.state.spt_from_cache[label] = str(cached)
            self.state_file.save()
            return str(cached)
        return str(spt_cache.store(self.cache_dir, key, self._pretrain(pretraining)))

    def _pretrain(self, pretraining: SearchPlan) -> str:
        """Each pretraining objective in a Tuner of its own."""
        found = self.tuners.run(TunerPlan(pretraining.label, (pretraining,)))
        return found[pretraining.label].best.selection.checkpoint_path

    def _untrained(self, pretraining: SearchPlan) -> Path:
        """Zero SPT epochs (the origin of an SPT-budget axis): a seeded, untrained encoder."""
        import torch

        from sptune.build import encoder_config
        from sptune.checkpoints import STATE_FILE
        from sptune.models import Pretrainer

        folder = self.out / f"{pretraining.label}-0-epochs"
        folder.mkdir(exist_ok=True)
        torch.manual_seed(self.plan.spec.seed)
        info = self.plan.training_data(pretraining, self.data).info
        model = Pretrainer(encoder_config(self.plan.spec.model, info), 1)
        torch.save({"model": model.state_dict()}, folder / STATE_FILE)
        print(f"[sptune] {pretraining.label}: 0 epochs, SPT variants start from an untrained encoder", flush=True)
        return folder
