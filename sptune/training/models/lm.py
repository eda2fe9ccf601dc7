"""A pretrained language model (e.g. GPT-2) as the backbone of a classifier (FPT variants).

New input layers (token embedding or a linear map of continuous values) and a new
pooled head are trained; the backbone comes from a Hugging Face checkpoint on local
disk (never downloaded) or, for the `frozen_random` control, from its config alone.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from sptune.errors import DataError
from sptune.training.models.encoder import mark_input_embedding
from sptune.training.models.heads import ClassificationHead, classify, pool
from sptune.training.models.model import ModelConfig

# Parameters of a frozen backbone that still train (Lu et al.: norms and positions).
TRAINABLE_IN_FROZEN = ("ln_", "layer_norm", "layernorm", "wpe", "position")


def _transformers():
    try:
        import transformers  # here: an optional extra, needed only by the language-model variants
    except ImportError as err:  # optional extra: pip install 'sptune[fpt]'
        raise ImportError("the fpt_* / frozen_random variants need `pip install transformers`") from err
    return transformers


def load_backbone(path: str | Path, pretrained: bool) -> nn.Module:
    tf = _transformers()
    if pretrained:
        return tf.AutoModel.from_pretrained(str(path), local_files_only=True)
    return tf.AutoModel.from_config(tf.AutoConfig.from_pretrained(str(path), local_files_only=True))


def backbone_width(backbone: nn.Module) -> int:
    config = backbone.config
    return int(getattr(config, "n_embd", None) or config.hidden_size)


class LMClassifier(nn.Module):
    def __init__(self, cfg: ModelConfig, backbone: nn.Module) -> None:
        super().__init__()
        if cfg.pooling == "cls":
            # No CLS token here, and the backbone is causal: position 0 sees only itself. The spec refuses
            # it (model.pooling); never replaced by another pooling behind the spec's back.
            raise ValueError("cls pooling on a causal language model reads a position that sees only itself")
        self.cfg = cfg
        width = backbone_width(backbone)
        enc = cfg.encoder
        if enc.input_kind == "tokens":
            self.embed: nn.Module = nn.Embedding(enc.vocab_size, width)
        else:
            self.embed = nn.Linear(enc.input_channels, width)
        mark_input_embedding(self.embed)
        self.backbone = backbone
        self.head = ClassificationHead(width, cfg.num_classes, cfg.pooling, cfg.paired)

    def _encode(self, inputs: torch.Tensor, key_padding: torch.Tensor | None) -> torch.Tensor:
        attention = None if key_padding is None else (~key_padding).long()
        h = self.backbone(inputs_embeds=self.embed(inputs), attention_mask=attention).last_hidden_state
        return pool(h, self.cfg.pooling, key_padding)

    def forward(self, inputs: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        return classify(self._encode, self.head, inputs, key_padding)


def freeze_backbone(model: LMClassifier) -> LMClassifier:
    """Freeze attention and feed-forward weights; norms, positions, input and head train."""
    for name, param in model.backbone.named_parameters():
        param.requires_grad_(any(key in name for key in TRAINABLE_IN_FROZEN))
    return model


def check_language_model(path: str | Path, seq_len: int) -> None:
    """Cheap checks before anything starts: a readable config that fits the sequences."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise DataError(
            str(path),
            "no Hugging Face checkpoint here (config.json missing)",
            "point language_model.path at a directory saved with model.save_pretrained()",
        )
    config = _transformers().AutoConfig.from_pretrained(str(path), local_files_only=True)
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if limit is not None and seq_len > limit:
        raise DataError(
            str(path),
            f"the model takes at most {limit} positions but the task has {seq_len}",
            "shorten the task's sequences (e.g. task.max_len) or use a model with more positions",
        )


def make_tiny_gpt2(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny, randomly initialised GPT-2 checkpoint for smoke runs of the FPT variants.

    It is NOT a pretrained model: real FPT studies point language_model.path at a real
    checkpoint (e.g. GPT-2 saved with save_pretrained); this only exercises the code path offline.
    """
    tf = _transformers()
    torch.manual_seed(seed)
    config = tf.GPT2Config(
        n_embd=64, n_layer=2, n_head=4, n_positions=1024, vocab_size=256, bos_token_id=0, eos_token_id=0
    )
    tf.GPT2Model(config).save_pretrained(str(out_dir))
    return Path(out_dir)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "make-tiny":
        print("usage: python -m sptune.training.models.lm make-tiny OUT_DIR", file=sys.stderr)
        sys.exit(2)
    print(make_tiny_gpt2(sys.argv[2]))
