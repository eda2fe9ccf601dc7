"""The study's one Ray Tune Trainable: a thin wrapper around the pure-PyTorch loops of `sptune.training.loops`.

One `step()` is one round: an epoch, or an evaluation round of a steps budget (`sptune.rules.budgets`), so the
schedulers' time unit is the same for every trial of a search. Each trial's config picks what it trains
(`trial_jobs`: pretraining or finetuning), so a reused actor takes trials of any stage; a packed trial's loop
trains in its pack's executor (`sptune.tuning.packs`), its results and checkpoints the same as a solo trial's.
Checkpoints hold the loop's whole state (model, optimizer, schedule and every RNG training draws from), so a
resumed trial continues exactly as if never interrupted.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from ray import tune

from sptune.judging.convergence import trial_done
from sptune.plan.trial_budgets import TrialBudgets
from sptune.rules.ranking import rank_key
from sptune.spec import SweepSpec
from sptune.storage import set_moves
from sptune.tasks.base import TaskSplits
from sptune.tracking.epoch_record import REPLAY_KEY, encode, epoch_row
from sptune.training.checkpoint_files import STATE_FILE, load_state
from sptune.training.loops import Diverged, EpochLoop
from sptune.tuning.callbacks.live_metrics import export_epoch
from sptune.tuning.packs.member import PackMember
from sptune.tuning.packs.membership import PACK_KEY
from sptune.tuning.trial_jobs import Finetuning, Pretraining, job_for

# The CheckpointConfig score attribute: the trial's best epoch gets its highest value (see StudyTrainable.step).
CHECKPOINT_RANK = "checkpoint_rank"


class StudyTrainable(tune.Trainable):
    """Every stage of a study in one Tuner: a config that names an `objective` pretrains, any other finetunes.
    `stage_data` (stage label -> data) holds the stages that train on other data (spt_cross pretrains on its
    source task); every other stage trains on `data`. Each trial's budget is the plan's (`budgets`:
    sptune.plan.trial_budgets)."""

    def setup(self, config: dict, spec: SweepSpec, budgets: TrialBudgets, data: TaskSplits,
              stage_data: dict | None = None, moves: dict[str, str] | None = None) -> None:
        self.spec, self.budgets, self.study_data, self.stage_data = spec, budgets, data, stage_data or {}
        if moves is not None:  # the driver's study folder moves: its trials' configs name checkpoints there
            set_moves(moves)
        # Each trial gets its CPU share; more threads than that oversubscribes the cores.
        torch.set_num_threads(max(1, math.floor(spec.resources.cpu)))
        self._start(config)

    def reset_config(self, new_config: dict) -> bool:
        self._start(new_config)  # lets Ray reuse this actor for the next trial
        return True

    def _start(self, config: dict) -> None:
        self.data = self.stage_data.get(config.get("stage"), self.study_data)
        budget = self.budgets.budget(config)
        # A packed trial's loop trains in its pack's executor (sptune.tuning.packs); a solo one's here.
        packed = config.get(PACK_KEY) is not None
        make = PackMember if packed else job_for
        self.job: Pretraining | Finetuning | PackMember = make(self.spec, self.data, config, budget)
        self.best: dict[str, float] = {}  # the best epoch's val_acc / val_loss / epoch (sptune.rules.ranking)
        self.improvements = 0
        self.epochs: list[dict[str, float]] = []  # every epoch's MLflow numbers so far (tracking.epoch_record)
        self.replay = False  # set by a restore: the next result carries the checkpoint's epochs

    @property
    def loop(self) -> EpochLoop:
        return self.job.loop

    @property
    def score_key(self) -> str:
        return self.job.score_key

    def step(self) -> dict:
        tokens_before = self.loop.tokens_seen  # cumulative: the epoch's own tokens give its tokens/s
        result = self._train_one_epoch()
        # Live view (Prometheus): from the numbers the epoch returned; the loop itself knows no Ray.
        export_epoch(self.spec.name, self.trial_id, self.config, result, tokens_before)
        if result.get("epoch") == 1:
            # Once per trial (diverged ones too): facts MLflow logs as the child run's params.
            result["mlflow_params"] = {**self.job.optim_params(), **self.job.run_params()}
            result.update(self.job.first_epoch_metrics())
        if self.replay:
            result[REPLAY_KEY], self.replay = encode(self.epochs), False
        self.epochs.append(epoch_row(result))
        return result

    def _train_one_epoch(self) -> dict:
        key = self.score_key
        try:
            metrics = self.loop.train_round()
        except Diverged as err:
            # Stop at once; mark it so selection never picks it and the report counts it.
            worst = -math.inf if key == "val_acc" else math.inf
            return {"diverged": 1, "error": str(err), "done": True, key: worst, "epoch": self.loop.epoch + 1,
                    **self._best_metrics(), "best_" + key: self.best.get(key, worst), CHECKPOINT_RANK: 0}
        improved = not self.best or rank_key(metrics, key) < rank_key(self.best, key)
        if improved:
            self.best = {k: float(metrics[k]) for k in ("val_acc", "val_loss", "epoch") if k in metrics}
            self.improvements += 1
        return {
            **metrics,
            "diverged": 0,
            **self._best_metrics(),
            "best_epoch": int(self.best["epoch"]),
            # The kept best checkpoint has the highest rank: the latest improvement, the epoch logged as
            # best_epoch (sptune.tuning.callbacks.checkpoint_pruning); epochs that do not improve rank 0.
            CHECKPOINT_RANK: self.improvements if improved else 0,
            # Each trial's own budget (stages sharing the Tuner differ); with until_converged, on while improving.
            "done": trial_done(metrics["epoch"], int(self.best["epoch"]), self.job.budget),
        }

    def _best_metrics(self) -> dict[str, float]:
        """The best epoch's numbers the ranking rule reads: best_val_acc and best_val_loss of a finetuning trial
        (the val_loss of its best-accuracy epoch, which breaks a tie at a rung of halving as selection does),
        best_val_loss of a pretraining trial."""
        names = ("val_acc", "val_loss") if self.score_key == "val_acc" else ("val_loss",)
        return {"best_" + k: self.best[k] for k in names if k in self.best}

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        state = {**self.loop.state_dict(), "best": self.best, "improvements": self.improvements, "epochs": self.epochs}
        torch.save(state, Path(checkpoint_dir) / STATE_FILE)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint: str) -> None:
        state = load_state(checkpoint)
        self.loop.load_state_dict(state)
        self.best = {k: float(v) for k, v in state["best"].items()}
        self.improvements = int(state["improvements"])
        self.epochs, self.replay = list(state.get("epochs", [])), True  # checkpoints older than the record: none
