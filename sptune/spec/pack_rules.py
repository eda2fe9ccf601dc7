"""What a pack of trials (`resources.pack`) allows: the settings refused with one, and when `auto` may pack."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sptune.spec.fields import problem
from sptune.spec.gpu_share import MEMBERS_PER_PACK_SMALL

if TYPE_CHECKING:
    from sptune.spec.sweep_spec import SweepSpec


def packable(spec: SweepSpec) -> bool:
    """Whether `resources.pack: auto` may pack this study: a transformer trained on a GPU, with nothing
    `check_packing` refuses for a pack of `MEMBERS_PER_PACK_SMALL` and no language-model variant (GPT-2's
    backbone is no small model). ``auto`` never makes a spec refused."""
    most = spec.resources.max_concurrent
    return (spec.training.device != "cpu" and spec.model.family == "transformer" and spec.model.attention_dropout == 0
            and spec.training.compile is not True and spec.scheduler.type != "hyperband"
            and (most is None or most >= MEMBERS_PER_PACK_SMALL)
            and not any(spec.variant_facts(name).language_model for name in spec.variants))


def check_packing(spec: SweepSpec) -> None:
    # A pack's members draw their dropout outside the fused forward, each from its own stream; attention dropout is
    # drawn inside the attention kernel. A pack runs its own fused step, which it captures whole on a GPU
    # (cuda_graphs) but which torch.compile has never compiled.
    if spec.resources.pack == 1:
        return
    if spec.model.attention_dropout > 0:
        raise problem("attention dropout cannot be packed (the attention kernel draws it inside one call over "
                      "every member's rows, from no member's own stream)",
                      "set model.attention_dropout: 0, or resources.pack: 1", "resources.pack")
    if spec.model.family != "transformer":
        # A pack stacks linear, layer-norm and embedding layers and the encoder's own tables; an SSM's mixer owns
        # parameters of its own. Any attention kernel packs: SDPA or flash-attn runs once on the members' folded
        # rows, outside any vmap, as for one trial.
        raise problem(f"model.family: {spec.model.family} cannot be packed (its mixer's parameters have no stacked "
                      "form in a pack)", "use model.family: transformer, or resources.pack: 1", "resources.pack")
    if spec.training.compile is True:
        raise problem("packed trials are not compiled with torch.compile (a pack runs its own fused step)",
                      "set training.compile: false, or cuda_graphs (a pack captures its whole step on a GPU), "
                      "or resources.pack: 1", "resources.pack")
    pack, most = spec.resources.pack, spec.resources.max_concurrent
    if most is not None and most < pack:
        raise problem(f"a pack of {pack} trials cannot run with resources.max_concurrent: {most} (a pack's members "
                      "wait for each other, so all of them must run at once)",
                      f"set resources.max_concurrent to at least {pack} (best a multiple), or a smaller pack",
                      "resources.max_concurrent")
    if spec.scheduler.type == "hyperband":
        raise problem("packed trials cannot run under hyperband (its brackets give a pack's members different "
                      "rungs, so they would not reach each round together)",
                      "use scheduler.type: sha (synchronous halving), asha or fifo, or resources.pack: 1",
                      "resources.pack")
