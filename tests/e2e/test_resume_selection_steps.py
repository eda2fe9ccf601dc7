"""kill -9 the driver while a variant's candidates train (digits_quick's LR extension and seed-robust selection
on), --resume, and compare with an uninterrupted study: no candidate trial is trained twice, nothing is lost, and
the picks, candidates and test numbers are the same."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from sptune.sweep import main
from tests.helpers_tiny import kill_driver_when, selected_rows, tiny_spec, trial_checkpointed, trial_configs

# FIFO so that every decision is restored (tests/helpers_tiny.py says why); digits_quick's own selection
# (top_k 2, seeds 2) and LR extension stay on (one round, to keep the chain of stages short).
STEPS = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=2", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.type=fifo", "--set", "model.n_layers=1", "--set", "rerun_seeds=1",
    "--set", "lr_extend.max_rounds=1",
]  # fmt: skip


def _stages(out: Path) -> Counter:
    return Counter(stage for stage, _, _ in trial_configs(out))


def in_a_thread(call: Callable[[], None]) -> Callable[[], None]:
    """Start `call` in a thread; what it returns waits for it to end and raises what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as err:  # pytest.fail's too
            raised.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> None:
        thread.join()
        if raised:
            raise raised[0]

    return join


def test_a_study_killed_mid_candidates_resumes_without_training_one_twice(ray_session, repo_root, tmp_path):
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    # The study to kill runs (a subprocess, its own Ray) while the uninterrupted one runs here: neither waits.
    killed = in_a_thread(lambda: kill_driver_when(
        lambda: trial_checkpointed(interrupted, '"candidates-'),
        [tiny_spec(repo_root), "--output", str(interrupted), *STEPS], repo_root,
        waiting_for="its candidates", timeout_s=400))
    try:
        assert main([tiny_spec(repo_root), "--output", str(reference), *STEPS]) == 0
    finally:
        killed()
    state = json.loads((interrupted / "study_state.json").read_text())
    assert not {"candidates-scratch", "candidates-spt"} <= set(state["searches"])  # killed before both were picked
    assert main([tiny_spec(repo_root), "--output", str(interrupted), "--resume", *STEPS]) == 0

    assert trial_configs(interrupted) == trial_configs(reference)  # same trials, none trained twice
    counts = _stages(interrupted)
    assert counts["candidates-scratch"] == counts["candidates-spt"] == 2 * 2
    ran, done = (json.loads((out / "results.json").read_text()) for out in (reference, interrupted))
    assert done["candidates"] == ran["candidates"] and done["lr_extension"] == ran["lr_extension"]
    assert selected_rows(done) == selected_rows(ran)
    assert len((interrupted / "test_reads.jsonl").read_text().splitlines()) == 2
