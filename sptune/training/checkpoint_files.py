"""Checkpoint files: where they live, how they load, and whether one fits a model."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import torch

from sptune import storage
from sptune.errors import DataError

STATE_FILE = "state.pt"


def checkpoint_dir(path: str | os.PathLike) -> Path:
    """A checkpoint folder, given the folder or its state.pt."""
    path = Path(path)
    return path.parent if path.is_file() else path


def load_state(checkpoint: str | os.PathLike) -> dict:
    """A checkpoint's state: a local folder (or its state.pt), or one under a remote --storage
    (a selected SPT checkpoint read by a trial on any node, or by the one test evaluation)."""
    # weights_only: checkpoints are untrusted input; sptune's hold only tensors and numbers.
    if storage.is_remote(checkpoint):
        uri = str(checkpoint)
        if not storage.without_query(uri).endswith("/" + STATE_FILE):
            uri = storage.join(uri, STATE_FILE)
        return torch.load(io.BytesIO(storage.read_bytes(uri)), map_location="cpu", weights_only=True)
    # A path recorded before the study's folder moved (a selection in the state) is read under the copy.
    local = checkpoint_dir(storage.relocated(str(checkpoint)))
    return torch.load(local / STATE_FILE, map_location="cpu", weights_only=True)


def check_spt_checkpoint(path: str | os.PathLike, encoder: torch.nn.Module, field: str = "pretrain.checkpoint") -> None:
    """Refuse (before anything starts) a file that is not an sptune checkpoint for this encoder."""
    fix = (
        "point it at a state.pt written by an sptune pretraining stage "
        "(OUTPUT/ray_results/pretrain/<trial>/checkpoint_*/state.pt) with the same model sizes"
    )
    file = checkpoint_dir(path) / STATE_FILE
    if not file.is_file():
        raise DataError(f"{field}: {path}", f"no {STATE_FILE} found", fix)
    try:
        state = load_state(file)
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, OSError) as err:
        raise DataError(str(file), f"not a readable PyTorch checkpoint ({type(err).__name__})", fix) from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise DataError(str(file), "a PyTorch file, but not an sptune checkpoint (no 'model' state)", fix)
    expected = {f"encoder.{k}": v.shape for k, v in encoder.state_dict().items()}
    found = {k: v.shape for k, v in state["model"].items() if k.startswith("encoder.")}
    missing = sorted(set(expected) - set(found))
    wrong = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
    if missing or wrong:
        detail = (
            f"missing {missing[:3]}"
            if missing
            else f"{wrong[0]} has shape {tuple(found[wrong[0]])}, the model needs {tuple(expected[wrong[0]])}"
        )
        raise DataError(str(file), f"the checkpoint does not fit this model ({detail})", fix)
