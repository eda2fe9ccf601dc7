"""The SPT checkpoint of each pretraining objective: a given checkpoint, an untrained encoder
(0 epochs), the campaign's cached checkpoint, or the selection of its own pretraining Tuner;
with `rerun_pretrain`, also one checkpoint per re-run seed (the selected config re-pretrained)."""

from __future__ import annotations

from pathlib import Path

from sptune import spt_cache
from sptune.checkpoints import checkpoint_dir
from sptune.errors import RuntimeFailure
from sptune.plan import SearchPlan, StudyPlan, TunerPlan
from sptune.study.reruns import rerun_plan
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
        # Re-pretraining needs the selected config, which only this study's own state records.
        if self.cache_dir is None or self.plan.spec.rerun_pretrain:
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

    def rerun_checkpoints(self, pretraining: SearchPlan) -> dict[int, str]:
        """rerun_pretrain: re-run seed -> the SPT checkpoint of the selected pretraining config re-pretrained
        with that seed (all seeds in one Tuner of their own, trained to the end)."""
        seeds = self.plan.rerun_seeds()
        if pretraining.epochs == 0:
            return {seed: str(self._untrained(pretraining, seed)) for seed in seeds}
        best = self.state_file.state.searches[pretraining.label].best.selection
        rerun = rerun_plan(pretraining, best, seeds)
        found = self.tuners.run(TunerPlan(rerun.label, (rerun,)))
        by_seed = {int(s.selection.config["seed"]): s.selection.checkpoint_path for s in found[rerun.label].selected}
        missing = [seed for seed in seeds if seed not in by_seed]
        if missing:
            fix = "lower the pretraining LR range, or drop rerun_pretrain; then rerun with --resume --output DIR"
            raise RuntimeFailure(rerun.label, f"re-pretraining with seed(s) {missing} diverged or failed", fix)
        return by_seed

    def _untrained(self, pretraining: SearchPlan, seed: int | None = None) -> Path:
        """Zero SPT epochs (the origin of an SPT-budget axis): a seeded, untrained encoder (the spec's seed,
        or a re-run's)."""
        import torch

        from sptune.build import encoder_config
        from sptune.checkpoints import STATE_FILE
        from sptune.models import Pretrainer

        folder = self.out / (f"{pretraining.label}-0-epochs" + (f"-seed{seed}" if seed is not None else ""))
        folder.mkdir(exist_ok=True)
        torch.manual_seed(self.plan.spec.seed if seed is None else seed)
        info = self.plan.training_data(pretraining, self.data).info
        model = Pretrainer(encoder_config(self.plan.spec.model, info), 1)
        torch.save({"model": model.state_dict()}, folder / STATE_FILE)
        print(f"[sptune] {pretraining.label}: 0 epochs, SPT variants start from an untrained encoder", flush=True)
        return folder
