"""A loop's own torch RNG stream: draws inside it depend on the stream's history alone, and the process's
RNG is as it was on the way out."""

from __future__ import annotations

import torch

from sptune.training.rng_stream import TorchRngStream


def _stream(seed: int) -> TorchRngStream:
    torch.manual_seed(seed)
    return TorchRngStream(torch.device("cpu"))


def test_draws_inside_the_stream_ignore_what_the_process_drew_between():
    a, b = _stream(7), _stream(7)
    with a.own():
        first_a = torch.rand(3)
    torch.rand(100)  # the process moves on (another trial in a reused actor)
    with b.own():
        first_b = torch.rand(3)
    with a.own():
        second_a = torch.rand(3)
    with b.own():
        second_b = torch.rand(3)
    assert torch.equal(first_a, first_b) and torch.equal(second_a, second_b)
    assert not torch.equal(first_a, second_a)


def test_the_process_rng_is_restored_on_the_way_out():
    stream = _stream(1)
    torch.manual_seed(42)
    expected = torch.rand(2)
    torch.manual_seed(42)
    with stream.own():
        torch.rand(50)
    assert torch.equal(torch.rand(2), expected)


def test_a_checkpointed_stream_resumes_exactly_and_a_missing_key_keeps_the_stream():
    stream = _stream(5)
    with stream.own():
        torch.rand(4)
    saved = {k: v.clone() for k, v in stream.states.items()}
    with stream.own():
        expected = torch.rand(3)

    resumed = _stream(123)
    resumed.load(saved)
    with resumed.own():
        assert torch.equal(torch.rand(3), expected)

    untouched = _stream(9)
    before = untouched.states["torch_rng"].clone()
    untouched.load({})
    assert torch.equal(untouched.states["torch_rng"], before)
