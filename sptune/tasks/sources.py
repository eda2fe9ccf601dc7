"""Where a file-based task's data come from: the user's ``--data-dir``, or a set generated into the cache.

ListOps, Retrieval and Pathfinder read official files; without ``--data-dir`` (and with option
``generate`` true) they write a small set in the same layout first (`sptune.tasks.cache`) and
read it back with the same reader. The pieces they share live here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sptune.errors import DataError
from sptune.tasks.arrays import limit_train
from sptune.tasks.base import TaskSplits
from sptune.tasks.content_hash import content_fingerprint, stamps_fingerprint
from sptune.tasks.prepared import cached_splits
from sptune.tasks.registry import TaskRequest

# Split sizes of the small generated sets (task options gen_n_train, gen_n_val, gen_n_test).
GENERATED_SPLIT_SIZES = {"n_train": 2000, "n_val": 300, "n_test": 300}

# build(files, max_len, source) reads the split files into arrays.
SplitFilesBuilder = Callable[[dict[str, Path], int, str], TaskSplits]


def generator_options(**knobs: int) -> dict[str, Any]:
    """Default task options of a generated set: ``generate`` on, then ``gen_seed``, the split sizes
    and the generator's own ``knobs``, each as ``gen_<name>``."""
    params = {"seed": 0, **GENERATED_SPLIT_SIZES, **knobs}
    return {"generate": True, **{f"gen_{name}": value for name, value in params.items()}}


def generator_params(request: TaskRequest, names: Iterable[str]) -> dict[str, int]:
    """The generator's arguments from the ``gen_*`` options: ``seed`` and each of ``names``."""
    return {"seed": int(request.option("gen_seed")), **{k: int(request.option(f"gen_{k}")) for k in names}}


def will_generate(request: TaskRequest) -> bool:
    """No ``--data-dir`` and option ``generate`` on: the data are generated on first load."""
    return request.data_dir is None and bool(request.option("generate"))


def no_data_dir_error(task: str, holding: str) -> DataError:
    """Neither data nor permission to generate them; ``holding`` names what ``--data-dir`` should hold."""
    fix = f"pass --data-dir DIR holding {holding}, or set generate: true"
    return DataError(f"task {task}", "no --data-dir given and option generate is false", fix)


def source_label(folder: Path, generated: bool) -> str:
    """How ``TaskSplits.source`` names the data: the folder, marked when it was generated."""
    return f"{'generated ' if generated else ''}{folder}"


@dataclass(frozen=True)
class SplitFileLayout:
    """Where a task's official train/val/test files sit, and how to name them when one is missing."""

    task: str  # also the ``python -m sptune.data generate`` kind that writes the layout
    folders: tuple[str, ...]  # under the data dir: our folder name first, then the release's
    names: Mapping[str, str]  # split -> file name
    missing: str  # the problem reported for an absent file
    pattern: str  # the files as the fix names them, e.g. "listops/basic_{train,val,test}.tsv"
    written: str = "one"  # what ``generate`` writes, as the fix calls it

    def find(self, data_dir: Path) -> dict[str, Path]:
        """split -> file under the first of ``folders`` found in ``data_dir`` (else the first one).

        Only stats are made, so the test file stays unopened; a missing file is a DataError naming it.
        """
        folder = next((data_dir / f for f in self.folders if (data_dir / f).is_dir()), data_dir / self.folders[0])
        files = {split: folder / name for split, name in self.names.items()}
        fix = (
            f"pass --data-dir DIR holding {self.pattern} from the LRA release, or write {self.written} with "
            f"`python -m sptune.data generate {self.task} --out DIR`, or leave --data-dir unset "
            "(task option generate: true) to use a small generated set"
        )
        for path in files.values():
            if not path.is_file():
                raise DataError(str(path), self.missing, fix)
        return files

    def resolve(self, request: TaskRequest, generate: Callable[[], Path]) -> tuple[dict[str, Path], bool]:
        """The files in ``--data-dir``, else in the folder ``generate()`` fills; and whether generated."""
        if request.data_dir is not None:
            return self.find(request.data_dir), False
        if not request.option("generate"):
            raise no_data_dir_error(self.task, self.pattern)
        return self.find(generate()), True


def load_split_files(
    task: str, request: TaskRequest, files: dict[str, Path], generated: bool, build: SplitFilesBuilder
) -> TaskSplits:
    """A task read from split files, through the prepared cache keyed by the files and ``max_len``."""
    max_len = int(request.option("max_len"))
    source = source_label(files["train"].parent, generated)
    key = {"files": split_files_key(files), "max_len": max_len}
    splits = cached_splits(task, key, lambda: build(files, max_len, source))
    return limit_train(splits, request.option("max_train"))


def split_files_key(files: dict[str, Path]) -> dict[str, object]:
    """The prepared cache's key for split files: train and validation by content, the test file by its
    stamp (`sptune.tasks.content_hash`), so the test file stays unopened until the final evaluation."""
    learned = {split: path for split, path in files.items() if split != "test"}
    key: dict[str, object] = dict(zip(learned, content_fingerprint(learned.values()), strict=True))
    if "test" in files:
        key["test"] = stamps_fingerprint([files["test"]])[0]
    return key
