"""Each variant's initialisation and trainable parameter set."""

from __future__ import annotations

import os

import pytest
import torch

from sptune.errors import DataError
from sptune.spec import KINDS, PRETRAINING_OF, VARIANT_KINDS, ModelSpec, SweepSpec, from_dict
from sptune.tasks.base import TaskInfo
from sptune.training.model_configs import classifier_config, encoder_config, variant_classifier_config
from sptune.training.models import Classifier, Pretrainer
from sptune.training.variants import BUILDERS, build_model, builds, check_every_kind_built, trainable_summary

INFO = TaskInfo(name="px", input_kind="continuous", seq_len=64, num_classes=10, levels=17)
SPEC = ModelSpec(d_model=32, n_layers=2, n_heads=4, d_ff=64)


def _spt_state(model: ModelSpec = SPEC) -> dict:
    torch.manual_seed(123)
    return Pretrainer(encoder_config(model, INFO), 1).state_dict()


def _config(kind: str):
    return classifier_config(SPEC, INFO, causal=KINDS[kind].architecture == "causal")


def _frozen(model) -> set[str]:
    return {n for n, p in model.named_parameters() if not p.requires_grad}


def test_every_kind_of_the_table_has_a_builder():
    # Holds by construction (the import of sptune.training.variants checks it): kept as the readable statement.
    assert set(VARIANT_KINDS) == set(BUILDERS) == set(PRETRAINING_OF)


def test_a_builder_for_a_kind_the_table_lacks_is_refused():
    with pytest.raises(ValueError, match="unknown variant kind 'frozen_everything'"):
        builds("frozen_everything")(lambda cfg, spt_state: None)
    assert "frozen_everything" not in BUILDERS


def test_a_second_builder_for_a_kind_is_refused():
    before = BUILDERS["scratch"]
    with pytest.raises(ValueError, match="'scratch' already has a builder"):
        builds("scratch")(lambda cfg, spt_state: None)
    assert BUILDERS["scratch"] is before


def test_a_kind_without_a_builder_fails_the_import_check():
    check_every_kind_built(BUILDERS)
    with pytest.raises(ValueError, match="without a builder: qk_init"):
        check_every_kind_built({k: b for k, b in BUILDERS.items() if k != "qk_init"})


def test_a_kind_added_to_the_table_alone_breaks_the_import(repo_root):
    """In a fresh process: a new row in the kinds table without its builder stops sptune.training.variants loading."""
    import subprocess
    import sys

    code = ("from sptune.spec.variant_kinds import KINDS, VariantKind; KINDS['new_kind'] = VariantKind('new_kind'); "
            "import sptune.training.variants")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root)
    assert proc.returncode != 0 and "variant kinds without a builder: new_kind" in proc.stderr


@pytest.mark.parametrize("kind", ["scratch", "scratch_causal", "spt", "spt_causal", "qk_init"])
def test_fully_trainable_variants(kind):
    model = build_model(kind, _config(kind), _spt_state() if PRETRAINING_OF[kind] else None)
    assert _frozen(model) == set()
    summary = trainable_summary(model)
    assert summary["trainable_params"] == summary["total_params"] > 0


def test_frozen_attn_freezes_exactly_attention():
    model = build_model("frozen_attn", classifier_config(SPEC, INFO))
    frozen = _frozen(model)
    assert frozen and all(".attn." in n for n in frozen)
    assert len(frozen) == 8 * SPEC.n_layers  # q, k, v, out: weight + bias per layer
    trainable = set(trainable_summary(model)["trainable_names"])
    assert "encoder.positions" not in trainable  # the fixed table both models share
    for must_train in ("encoder.embed.weight", "encoder.norm.weight", "head.mlp.0.weight",
                       "encoder.blocks.0.norm1.weight", "encoder.blocks.0.mlp.0.weight"):
        assert must_train in trainable


def test_frozen_attn_mlp_also_freezes_mlps():
    model = build_model("frozen_attn_mlp", classifier_config(SPEC, INFO))
    frozen = _frozen(model)
    assert all(".attn." in n or ".mlp." in n for n in frozen)
    assert len(frozen) == 12 * SPEC.n_layers  # + two MLP linears per layer
    assert "encoder.blocks.1.norm2.weight" not in frozen and "encoder.embed.weight" not in frozen


def test_frozen_parameters_do_not_move_in_training():
    model = build_model("frozen_attn", classifier_config(SPEC, INFO))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    x = torch.rand(8, 64, 2)
    torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (8,))).backward()
    opt.step()
    for name, param in model.named_parameters():
        assert torch.equal(param, before[name]) == (not param.requires_grad), name


def _fpt_trainable(name: str) -> bool:
    """FPT's rule (Lu et al.) written from the model's own names: the head, the input embedding, the positions,
    the CLS vector and every layer norm train; nothing else does."""
    module = name.rsplit(".", 1)[0]
    return (name.startswith(("head.", "encoder.embed.")) or name in ("encoder.positions", "encoder.cls")
            or module.endswith(("norm", "norm1", "norm2")))


FROZEN_SPECS = {"learned": SPEC, "cls_rotary": SPEC.model_copy(update={"pooling": "cls", "positions": "rotary"}),
                "ssm": SPEC.model_copy(update={"family": "ssm", "ssm_state": 8})}


@pytest.mark.parametrize("model_spec", FROZEN_SPECS.values(), ids=FROZEN_SPECS.keys())
def test_spt_frozen_trains_exactly_the_head_norms_embedding_and_positions(model_spec):
    model = build_model("spt_frozen", classifier_config(model_spec, INFO), _spt_state(model_spec))
    names = [n for n, _ in model.named_parameters()]
    expected = {n for n in names if _fpt_trainable(n)}
    summary = trainable_summary(model)
    assert set(summary["trainable_names"]) == expected
    assert summary["trainable_params"] == sum(p.numel() for n, p in model.named_parameters() if n in expected)
    assert summary["trainable_params"] < summary["total_params"]
    must_train = {"encoder.embed.weight", "encoder.norm.weight", "encoder.blocks.1.norm2.bias", "head.mlp.2.weight"}
    assert must_train <= expected
    assert ("encoder.cls" in expected) == (model_spec.pooling == "cls")
    assert ("encoder.positions" in expected) == (model_spec.positions == "learned")
    mixer = "ssm" if model_spec.family == "ssm" else "attn"
    assert any(f".{mixer}." in n for n in _frozen(model)) and "encoder.blocks.0.mlp.0.weight" in _frozen(model)


def test_spt_frozen_starts_from_every_spt_encoder_weight():
    state = _spt_state()
    model = build_model("spt_frozen", classifier_config(SPEC, INFO), state)
    encoder = model.encoder.state_dict()
    pretrained = {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}
    assert set(encoder) == set(pretrained)
    assert all(torch.equal(encoder[k], v) for k, v in pretrained.items())
    assert not torch.equal(encoder["blocks.0.attn.query.weight"], Classifier(classifier_config(SPEC, INFO))
                           .encoder.state_dict()["blocks.0.attn.query.weight"])  # not a random init
    with pytest.raises(ValueError, match="'spt_frozen' needs the selected pretraining checkpoint"):
        build_model("spt_frozen", classifier_config(SPEC, INFO))


def test_a_training_step_moves_only_what_spt_frozen_trains():
    """Through the real loop (its AdamW groups with weight decay): frozen weights stay bit-identical."""
    from sptune.tasks.base import ArraySplit
    from sptune.training.loops import FinetuneLoop, OptimConfig

    cfg = classifier_config(SPEC, INFO)
    model = build_model("spt_frozen", cfg, _spt_state())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(0)
    split = ArraySplit(torch.randint(0, 17, (16, 64)).numpy().astype("uint8"), torch.randint(0, 10, (16,)).numpy())
    optim = OptimConfig(lr=1e-2, batch_size=8, epochs=1, weight_decay=0.1, warmup_fraction=0.0, device="cpu")
    FinetuneLoop(cfg, INFO, split, split, optim, model=model).train_round()
    for name, param in model.named_parameters():
        assert torch.equal(param.detach().cpu(), before[name]) == (not param.requires_grad), name


def test_qk_init_copies_only_query_and_key():
    state = _spt_state()
    model = build_model("qk_init", classifier_config(SPEC, INFO), state)
    encoder = model.encoder.state_dict()
    for name, tensor in state.items():
        if not name.startswith("encoder."):
            continue
        local = name.removeprefix("encoder.")
        copied = torch.equal(encoder[local], tensor)
        is_qk = ".attn.query." in local or ".attn.key." in local
        # Linear weights differ between two random inits unless copied (norms start at 1).
        if (".attn." in local or ".mlp." in local) and local.endswith("weight"):
            assert copied == is_qk, local


def test_qk_init_refuses_a_checkpoint_whose_query_key_maps_do_not_match():
    """A checkpoint of another model would copy some maps or none: refused, saying what did not match."""
    deeper, shallower = SPEC.model_copy(update={"n_layers": 3}), SPEC.model_copy(update={"n_layers": 1})
    wider = SPEC.model_copy(update={"d_model": 64})
    for other, detail in ((deeper, "extra ['blocks.2.attn"), (shallower, "missing ['blocks.1.attn"),
                          (wider, "key.bias has shape (64,), the model needs (32,)")):
        with pytest.raises(DataError, match="query/key weights do not match this model") as caught:
            build_model("qk_init", classifier_config(SPEC, INFO), _spt_state(other))
        assert detail in caught.value.problem and "n_layers" in caught.value.fix


def _study(kinds: dict[str, str], objective: str = "masked") -> SweepSpec:
    search = {"lr": {"type": "grid", "values": [1e-3]}, "batch_size": {"type": "grid", "values": [32]}}
    model = {**SPEC.model_dump(), "pooling": "last", "dropout": 0.0}
    return from_dict({"name": "c", "task": {"name": "digits"}, "model": model,
                      "pretrain": {"objective": objective, "search": search},
                      "variants": {name: {"kind": kind, "search": search} for name, kind in kinds.items()}})


def _earlier_positions_move(model: torch.nn.Module) -> bool:
    """Whether changing the last position's input changes any earlier position's encoding in the classifier."""
    seen = []
    model.encoder.register_forward_hook(lambda module, inputs, h: seen.append(h))
    x = torch.rand(1, 64, 2)
    y = x.clone()
    y[:, 63] = 0.5
    with torch.no_grad():
        logits_x, logits_y = model(x), model(y)
    assert not torch.allclose(logits_x, logits_y)  # "last" pooling reads the changed position: not blind
    return not torch.allclose(seen[0][:, :63], seen[1][:, :63], atol=1e-6)


@pytest.mark.parametrize("variant, objective", [("spt_causal", "masked"), ("scratch_causal", "masked"),
                                                ("spt", "causal")])
def test_causal_classifier_ignores_future_positions(variant, objective):
    """Built as the study builds it (its kind's model, from the kinds table): a causal variant's earlier positions
    never see a later one, while the bidirectional `scratch` of the same study, same test, does."""
    spec = _study({"c": "spt" if variant == "spt" else variant, "b": "scratch"}, objective)
    kind = spec.variant_kind("c")
    causal = build_model(kind, variant_classifier_config(spec, INFO, "c"),
                         _spt_state() if spec.variant_objective("c") else None).eval()
    bidirectional = build_model("scratch", variant_classifier_config(spec, INFO, "b")).eval()
    assert not _earlier_positions_move(causal)
    assert _earlier_positions_move(bidirectional)


def test_scratch_causal_is_causal_with_no_pretraining():
    spec = _study({"scratch": "scratch", "sc": "scratch_causal"})
    assert spec.variant_objective("sc") is None and spec.variant_is_causal("sc")
    assert not spec.variant_is_causal("scratch")
    assert spec.pretraining_objectives() == []
    assert variant_classifier_config(spec, INFO, "sc").causal


def test_a_causal_kind_on_a_bidirectional_config_is_refused():
    with pytest.raises(ValueError, match="'scratch_causal' trains a causal model"):
        build_model("scratch_causal", classifier_config(SPEC, INFO))


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    """A tiny GPT-2 built and saved locally: nothing is downloaded."""
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(7)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128, vocab_size=64,
                                     bos_token_id=0, eos_token_id=0)
    transformers.GPT2Model(config).save_pretrained(path)
    return path


def test_fpt_frozen_trains_only_io_norms_and_positions(tiny_gpt2):
    model = build_model("fpt_frozen", classifier_config(SPEC, INFO), lm_path=str(tiny_gpt2))
    trainable = set(trainable_summary(model)["trainable_names"])
    assert {"embed.weight", "backbone.wpe.weight", "backbone.h.0.ln_1.weight", "backbone.ln_f.weight",
            "head.mlp.0.weight"} <= trainable
    frozen = _frozen(model)
    assert "backbone.h.0.attn.c_attn.weight" in frozen and "backbone.h.1.mlp.c_fc.weight" in frozen
    assert all(".attn." in n or ".mlp." in n or n == "backbone.wte.weight" for n in frozen), frozen


def test_fpt_loads_the_pretrained_weights_and_frozen_random_does_not(tiny_gpt2):
    import transformers

    saved = transformers.GPT2Model.from_pretrained(tiny_gpt2).state_dict()
    fpt = build_model("fpt_unfrozen", classifier_config(SPEC, INFO), lm_path=str(tiny_gpt2))
    rnd = build_model("frozen_random", classifier_config(SPEC, INFO), lm_path=str(tiny_gpt2))
    key = "h.0.attn.c_attn.weight"
    assert torch.equal(fpt.backbone.state_dict()[key], saved[key])
    assert not torch.equal(rnd.backbone.state_dict()[key], saved[key])
    assert _frozen(fpt) == set() and _frozen(rnd) == {n for n in _frozen(rnd) if ".attn." in n or ".mlp." in n
                                                       or n.endswith("wte.weight")}
    x = torch.rand(3, 64, 2)
    assert fpt(x).shape == (3, 10) and rnd(x).shape == (3, 10)


def test_a_language_model_never_turns_cls_pooling_into_another(tiny_gpt2):
    """GPT-2 is causal and has no CLS token: refused (the spec refuses it first), never silently mean-pooled."""
    with pytest.raises(ValueError, match="cls pooling on a causal language model"):
        build_model("fpt_frozen", classifier_config(SPEC.model_copy(update={"pooling": "cls"}), INFO),
                    lm_path=str(tiny_gpt2))


def test_fpt_spec_needs_a_language_model(repo_root, tmp_path, capsys):
    from sptune.sweep import main

    spec = tmp_path / "fpt.yaml"
    spec.write_text("name: f\ntask: {name: digits}\nvariants:\n  fpt_frozen:\n    search:\n"
                    "      lr: {type: grid, values: [1.0e-3]}\n      batch_size: {type: choice, values: [32]}\n")
    assert main([str(spec), "--dry-run"]) == 2
    assert "variants.fpt_frozen" in capsys.readouterr().err
    spec.write_text(spec.read_text() + f"language_model: {{path: {tmp_path / 'nothing'}}}\n")
    assert main([str(spec), "--dry-run"]) == 2
    assert "config.json" in capsys.readouterr().err


def test_a_spec_with_spt_frozen_dry_runs_from_spts_pretraining(repo_root, capsys):
    from sptune.sweep import main

    search = "{lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2}, batch_size: {type: choice, values: [32, 64]}}"
    spec = os.path.join(repo_root, "search_spaces", "digits_quick.yaml")
    assert main([spec, "--dry-run", "--set", f"variants.spt_frozen={{num_samples: 2, search: {search}}}"]) == 0
    out = capsys.readouterr().out
    (line,) = [row for row in out.splitlines() if row.strip().startswith("search-spt_frozen")]
    assert "kind=spt_frozen" in line and "init from pretrain" in line
    assert out.count("objective=masked") == 1  # the one pretraining spt and spt_frozen share


CROSS_SPEC = """
name: cross
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64, positions: learned}  # learned: a table whose shape differs
pretrain:
  loss: l2
  epochs: 1
  num_samples: 1
  search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}
finetune: {epochs: 1, num_samples: 1}
variants:
  cross:
    kind: spt_cross
    source_task: {name: SOURCE, gen_n: 120}
    search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}
scheduler: {type: fifo}
"""


def test_spt_cross_pointing_at_a_missing_task(tmp_path, capsys):
    from sptune.sweep import main

    spec = tmp_path / "cross.yaml"
    spec.write_text(CROSS_SPEC.replace("SOURCE", "cifar1000"))
    assert main([str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "variants.cross.source_task" in err and "cifar1000" in err


def test_relative_model_paths_are_resolved_for_trials(tiny_gpt2, tmp_path, monkeypatch):
    """Trials run in their own directories: a relative language_model.path must be made absolute."""
    import shutil

    from sptune.preflight.inputs import load_inputs

    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_gpt2, tmp_path / "lm")
    spec = tmp_path / "f.yaml"
    spec.write_text("name: f\ntask: {name: digits}\nlanguage_model: {path: lm}\nvariants:\n  fpt_frozen:\n"
                    "    search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}\n")
    resolved = load_inputs(spec, (), data_dir=None).spec
    assert resolved.language_model.path == str(tmp_path / "lm")


def test_same_seed_same_initial_weights_whatever_ran_before():
    """A reused Ray actor must not carry RNG state into the next trial's initialisation."""
    from sptune.tasks.base import ArraySplit
    from sptune.training.loops import FinetuneLoop, OptimConfig

    split = ArraySplit(torch.randint(0, 17, (8, 64)).numpy().astype("uint8"), torch.zeros(8).long().numpy())
    cfg = classifier_config(SPEC, INFO)

    def first_weight() -> torch.Tensor:
        loop = FinetuneLoop(cfg, INFO, split, split, OptimConfig(lr=1e-3, batch_size=4, epochs=1, seed=0))
        return loop.model.encoder.embed.weight.detach().clone()

    a = first_weight()
    torch.rand(1000)  # anything consuming the global RNG in between
    assert torch.equal(a, first_weight())
