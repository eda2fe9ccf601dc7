"""A member trial's side of a pack: a job whose loop trains in the pack's executor (`executor.PackExecutor`).

It answers what the trainable asks of a solo job (`trial_jobs`): the score key, the budget, the one-off MLflow
facts, and a loop whose `train_round`, `state_dict` and `load_state_dict` are the member's own, computed in the
executor. So the trainable builds its result, its checkpoint (today's per-trial format) and its restore exactly
as for a solo trial.
"""

from __future__ import annotations

from typing import Any

import ray

from sptune.rules.budgets import Budget
from sptune.spec import SweepSpec
from sptune.tasks.base import TaskSplits
from sptune.training.loops import Diverged
from sptune.tuning.packs.executor import executor_for
from sptune.tuning.packs.membership import PackSlot, without_pack


class MemberLeft(RuntimeError):
    """The executor was told this member's trial ended while the trial still asked for a round."""


class MemberLoop:
    """The member's loop as the trainable uses it; every call goes to the executor."""

    def __init__(self, executor: Any, member: int, facts: dict[str, Any]) -> None:
        self.executor, self.member = executor, member
        self.epoch, self.tokens_seen = int(facts["epoch"]), int(facts["tokens_seen"])

    def train_round(self) -> dict[str, float]:
        metrics = ray.get(self.executor.next_round.remote(self.member))
        if metrics.get("diverged"):
            raise Diverged(str(metrics.get("error")))
        if metrics.get("failed"):
            raise RuntimeError(f"pack member {self.member}'s round failed in its executor: {metrics['failed']}")
        if metrics.get("left"):
            raise MemberLeft(f"pack member {self.member} was counted as ended while it still trained")
        self.epoch, self.tokens_seen = int(metrics["epoch"]), int(metrics["tokens_seen"])
        return metrics

    def state_dict(self) -> dict:
        return ray.get(self.executor.state.remote(self.member))

    def load_state_dict(self, state: dict) -> None:
        ray.get(self.executor.load.remote(self.member, state))
        self.epoch, self.tokens_seen = int(state["epoch"]), int(state["tokens_seen"])


class PackMember:
    """A packed trial's job: joins its pack's executor (creating it if first) with its own config and budget."""

    def __init__(self, spec: SweepSpec, data: TaskSplits, config: dict, budget: Budget) -> None:
        slot = PackSlot.of(config)
        assert slot is not None, "a packed trial's config names its pack"
        self.budget = budget
        executor = executor_for(slot, spec, data)
        facts = ray.get(executor.join.remote(slot.member, without_pack(config), budget))
        self.score_key: str = facts["score_key"]
        self._first, self._params = facts["first_epoch_metrics"], facts["mlflow_params"]
        self.loop = MemberLoop(executor, slot.member, facts)

    def first_epoch_metrics(self) -> dict[str, Any]:
        return dict(self._first)

    def run_params(self) -> dict[str, Any]:
        return {}

    def optim_params(self) -> dict[str, Any]:
        return dict(self._params)  # the executor's: the device and precision it trains with
