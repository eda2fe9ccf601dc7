"""Masking and reconstruction losses: ratio, redraw, masked-only loss, no leakage."""

from __future__ import annotations

import torch

from sptune.tasks.base import TaskInfo
from sptune.training import objectives as obj

PIXELS = TaskInfo(name="px", input_kind="continuous", seq_len=512, num_classes=2, levels=256)
TOKENS = TaskInfo(name="tok", input_kind="tokens", seq_len=512, num_classes=2, vocab_size=20, pad_id=0, mask_id=1)


def test_mask_ratio_is_respected():
    gen = torch.Generator().manual_seed(0)
    for ratio in (0.1, 0.15, 0.5):
        mask = obj.draw_mask(torch.Size([64, 512]), ratio, gen)
        assert abs(mask.float().mean().item() - ratio) < 0.01


def test_masks_are_redrawn_each_time():
    gen = torch.Generator().manual_seed(0)
    first = obj.draw_mask(torch.Size([8, 512]), 0.5, gen)
    second = obj.draw_mask(torch.Size([8, 512]), 0.5, gen)
    assert not torch.equal(first, second)


def test_padding_is_never_masked():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(4, 20, (8, 512))
    x[:, 300:] = TOKENS.pad_id
    mask = obj.draw_mask(x.shape, 0.9, gen, obj.padding_of(x, TOKENS))
    assert not mask[:, 300:].any() and mask[:, :300].any()


def test_masked_pixels_do_not_leak_into_inputs():
    x = torch.randint(1, 256, (4, 512), dtype=torch.uint8)
    mask = obj.draw_mask(x.shape, 0.5, torch.Generator().manual_seed(1))
    inputs = obj.model_inputs(x, PIXELS, mask)
    assert inputs.shape == (4, 512, 2)
    assert torch.all(inputs[..., 0][mask] == 0)  # value hidden
    assert torch.all(inputs[..., 1][mask] == 1) and torch.all(inputs[..., 1][~mask] == 0)  # flag channel
    assert torch.allclose(inputs[..., 0][~mask], x[~mask].float() / 255)
    # Changing masked values changes nothing the model sees.
    x2 = x.clone()
    x2[mask] = 7
    assert torch.equal(obj.model_inputs(x2, PIXELS, mask), inputs)


def test_masked_tokens_become_the_mask_id():
    x = torch.randint(4, 20, (4, 512))
    mask = obj.draw_mask(x.shape, 0.15, torch.Generator().manual_seed(2))
    ids = obj.model_inputs(x, TOKENS, mask)
    assert torch.all(ids[mask] == TOKENS.mask_id)
    assert torch.equal(ids[~mask], x[~mask])


def test_loss_counts_masked_positions_only():
    torch.manual_seed(0)
    target = torch.rand(2, 512)
    mask = obj.draw_mask(target.shape, 0.5, torch.Generator().manual_seed(3))
    pred = target.clone().unsqueeze(-1)
    pred[~mask] += 5.0  # huge errors where nothing is masked
    for loss in ("l1", "l2"):
        assert obj.reconstruction_loss(pred, target, mask, loss).item() == 0.0
    pred[mask] += 0.5
    assert abs(obj.reconstruction_loss(pred, target, mask, "l1").item() - 0.5) < 1e-5


def test_ce_loss_on_masked_tokens_only():
    targets = torch.randint(0, 20, (2, 64))
    mask = torch.zeros(2, 64, dtype=torch.bool)
    mask[:, :10] = True
    logits = torch.full((2, 64, 20), -10.0)
    logits.scatter_(-1, targets.unsqueeze(-1), 10.0)  # perfect predictions
    logits[:, 10:] = 0.0  # garbage on unmasked positions
    assert obj.reconstruction_loss(logits, targets, mask, "ce").item() < 1e-6


def test_causal_targets_are_next_elements():
    x = torch.arange(4, 14).unsqueeze(0)
    shifted = obj.shift_left(x)
    where = obj.causal_positions(x, TOKENS)
    assert torch.equal(shifted[0, :-1], x[0, 1:]) and not where[0, -1] and where[0, :-1].all()


def test_the_mask_is_placed_on_the_batch_device_with_padding_there_too():
    # The loop's generator is on the CPU and a GPU batch's padding on the GPU; a meta-device batch stands
    # in for the GPU here (the old `mask &= ~padding` raised on the device mismatch).
    padding = torch.zeros(4, 16, dtype=torch.bool, device="meta")
    mask = obj.draw_mask(padding.shape, 0.5, torch.Generator().manual_seed(0), padding, padding.device)
    assert mask.device.type == "meta" and mask.dtype == torch.bool and mask.shape == padding.shape


def test_a_mask_placed_on_a_device_is_the_same_draw():
    gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    x = torch.randint(4, 20, (8, 64))
    x[:, 40:] = TOKENS.pad_id
    padding = obj.padding_of(x, TOKENS)
    assert torch.equal(obj.draw_mask(x.shape, 0.3, gen_a, padding, "cpu"), obj.draw_mask(x.shape, 0.3, gen_b, padding))


def test_token_padding_is_a_mask_even_where_nothing_is_padded():
    # Asking whether anything is padded would read back from a GPU every batch.
    x = torch.randint(4, 20, (2, 8))
    padding = obj.padding_of(x, TOKENS)
    assert padding is not None and not padding.any()
    assert obj.padding_of(torch.rand(2, 8), PIXELS) is None
    assert not obj.has_padding(TOKENS, x) and obj.has_padding(TOKENS, x, torch.zeros(1, 8, dtype=torch.long))


def _gathered_loss(pred, target, where, loss):
    """The loss as a boolean gather computes it (the formula the masked arithmetic must match)."""
    if not where.any():
        return torch.zeros(())
    if loss == "ce":
        return torch.nn.functional.cross_entropy(pred[where].float(), target[where])
    diff = pred.squeeze(-1)[where].float() - target[where]
    return diff.abs().mean() if loss == "l1" else (diff**2).mean()


def test_masked_arithmetic_matches_the_gathered_loss_and_hits():
    torch.manual_seed(0)
    for ratio in (0.0, 0.3, 1.0):  # 0.0: nothing selected
        where = obj.draw_mask(torch.Size([4, 32]), ratio, torch.Generator().manual_seed(1))
        logits, tokens = torch.randn(4, 32, 20, requires_grad=True), torch.randint(0, 20, (4, 32))
        values, levels = torch.rand(4, 32, 1, requires_grad=True), torch.rand(4, 32)
        for pred, target, loss in ((logits, tokens, "ce"), (values, levels, "l1"), (values, levels, "l2")):
            got = obj.reconstruction_loss(pred, target, where, loss)
            assert torch.allclose(got, _gathered_loss(pred, target, where, loss), atol=1e-6), (ratio, loss)
            (grad,) = torch.autograd.grad(got, pred)
            assert torch.all(grad[~where] == 0)
        hits = obj.reconstruction_hits(logits.detach(), tokens, where, "ce", TOKENS)
        assert int(hits) == int((logits.detach()[where].argmax(-1) == tokens[where]).sum())


def test_a_non_finite_prediction_outside_the_selection_does_not_reach_the_loss():
    where = torch.zeros(2, 8, dtype=torch.bool)
    where[:, :4] = True
    pred = torch.zeros(2, 8, 1)
    pred[:, 6] = float("inf")
    assert obj.reconstruction_loss(pred, torch.zeros(2, 8), where, "l2").item() == 0.0
