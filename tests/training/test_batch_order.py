"""The order a loop serves rows in: whole shuffled passes, continued across calls and through a checkpoint."""

from __future__ import annotations

import torch

from sptune.training.batch_order import BatchOrder


def _order(seed: int = 3) -> BatchOrder:
    return BatchOrder(10, 4, torch.Generator().manual_seed(seed), torch.device("cpu"))


def test_each_pass_serves_every_row_once_in_batches_and_the_last_batch_is_what_is_left():
    order = _order()
    first = [order.next() for _ in range(3)]
    assert [len(b) for b in first] == [4, 4, 2]
    assert sorted(torch.cat(first).tolist()) == list(range(10))
    second = torch.cat([order.next() for _ in range(3)])
    assert sorted(second.tolist()) == list(range(10))
    assert not torch.equal(torch.cat(first), second)  # a new order per pass


def test_a_pass_in_progress_resumes_exactly_through_its_position():
    order, generator_state = _order(), None
    order.next()
    generator_state = order.generator.get_state()
    saved = order.position()
    assert saved["data_cursor"] == 4 and len(saved["data_order"]) == 10
    rest = [order.next() for _ in range(4)]  # the pass's end and the next pass's start

    resumed = _order(seed=99)
    resumed.generator.set_state(generator_state)
    resumed.load(saved)
    assert all(torch.equal(a, resumed.next()) for a in rest)


def test_between_passes_the_position_is_empty_and_restart_forgets_a_pass():
    order = _order()
    assert order.position() == {}
    order.next()
    order.restart()
    assert order.position() == {} and order.cursor == 0
