"""The digits task reads scikit-learn's bundled file itself: the same arrays, without importing scikit-learn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from sptune.tasks import digits


def test_the_arrays_are_scikit_learns_own():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x, y = digits._all_digits()
    assert digits._bundled_csv() is not None  # the fast path ran, not the fallback
    assert x.dtype == np.uint8 and y.dtype == np.int64
    assert np.array_equal(x, bunch.data.astype(np.uint8)) and np.array_equal(y, bunch.target)


def test_loading_digits_does_not_import_scikit_learn():
    code = (
        "import sys\n"
        "from sptune.tasks import TaskRequest, digits, load_task\n"
        "data = load_task(TaskRequest('digits', {}, 0, None))\n"
        "test = digits._read_test()  # what the guarded `data.test` reads, once allowed\n"
        "print(len(data.train.y), len(data.val.y), len(test.y), 'sklearn' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1258", "180", "359", "False"]
