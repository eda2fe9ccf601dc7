"""Device settings every loop applies: TF32 matmuls for fp32 on a GPU, and opt-in static-shape compilation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sptune.training.device import compiled, set_fp32_matmul


@pytest.fixture
def tf32_flags():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_fp32_on_a_gpu_multiplies_in_tf32_and_a_cpu_loop_changes_nothing(tf32_flags):
    set_fp32_matmul(torch.device("cpu"))
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    set_fp32_matmul(torch.device("cuda"))  # only sets the backend flags: no GPU needed
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32


def test_compile_off_is_the_model_itself():
    model = nn.Linear(4, 2)
    assert compiled(model, False) is model


def test_cuda_graphs_leaves_a_gpu_model_eager_for_the_whole_step_capture_and_compiles_it_elsewhere():
    model = nn.Linear(4, 2)
    assert compiled(model, "cuda_graphs", torch.device("cuda")) is model  # the loop captures the step itself
    assert compiled(model, "cuda_graphs", torch.device("cpu")) is not model  # no graphs on a CPU: as `true`
