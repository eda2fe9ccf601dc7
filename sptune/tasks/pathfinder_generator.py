"""Linsley et al.'s Pathfinder generator: two target snakes, distractors, and two markers.

`generate_pathfinder` writes images in the official LRA file layout, so the reader in
`sptune.tasks.pathfinder` reads generated and released data alike. `render_sample` draws one
image and returns its ground truth (`SampleTruth`) for tests and audits.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from sptune.errors import DataError
from sptune.tasks.progress_bar import bar

# Bump when the drawing changes: generated sets are cached under a key that includes it.
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class PathfinderParams:
    """Linsley et al.'s knobs; defaults are LRA's 32x32 "hard" settings (lengths in pixels).

    Our reading of two knobs the LRA paper names without defining: ``continuity`` c lets
    consecutive segments turn by at most c * 45 degrees, and ``seed_distance`` is the distance
    between the two target snakes' starting points (as in the original seeding, which also keeps
    the first start 2 * seed_distance from the border). Known differences from Linsley et al.'s
    renderer: segments join end to end (no gap between paddles), ``margin`` is the empty ring
    between different snakes, and there are no single-paddle distractors.
    """

    resolution: int = 32
    contour_length: int = 14
    padding: float = 1.0
    paddle_length: float = 2.0
    thickness: float = 0.5
    margin: int = 1
    marker_radius: float = 1.5
    antialias: int = 2
    seed_distance: float = 7.0
    continuity: float = 1.0
    distractor_length: int = 14 // 3
    num_distractors: int = 20 // (14 // 3)
    max_trials: int = 20


def default_params(resolution: int = 32, contour_length: int = 14) -> PathfinderParams:
    """LRA's 32x32 settings, lengths scaled by resolution / 32 (PathX: 128 -> x4)."""
    s = resolution / 32
    distractor_length = max(1, contour_length // 3)
    return PathfinderParams(
        resolution=resolution,
        contour_length=contour_length,
        padding=1.0 * s,
        paddle_length=2.0 * s,
        thickness=0.5 * s,
        margin=max(1, round(1 * s)),
        marker_radius=1.5 * s,
        seed_distance=7.0 * s,
        distractor_length=distractor_length,
        num_distractors=max(1, round(20 // distractor_length * s)),
    )


@dataclass
class SampleTruth:
    """Ground truth of one rendered image, for tests and audits.

    ``strokes`` is the binary stroke image (markers not drawn) and ``stroke_ids`` says which
    snake owns each stroke pixel (-1: background; 0 and 1 are the target snakes). Snakes never
    touch (``margin`` keeps an empty pixel ring), so connected components of ``strokes`` are snakes.
    """

    label: int
    image: np.ndarray
    strokes: np.ndarray
    stroke_ids: np.ndarray
    markers: tuple[tuple[int, int], tuple[int, int]]
    marker_snakes: tuple[int, int]
    snake_ends: list[tuple[tuple[float, float], tuple[float, float]]] = field(default_factory=list)


class _Canvas:
    """Occupancy while drawing one image: which snakes sit at or within ``margin`` of each pixel.

    Grids are flat Python lists padded by ``margin`` on every side, so dilation needs no bounds
    checks; plain lists beat numpy here because every segment touches only a few dozen pixels.
    """

    def __init__(self, p: PathfinderParams) -> None:
        self.p = p
        self.n, self.m = p.resolution, p.margin
        self.width = self.n + 2 * self.m
        self.near = [0] * (self.width * self.width)  # bitmask of the snakes near each pixel
        self.lo, self.hi = math.ceil(p.padding), self.n - math.ceil(p.padding)
        r = p.thickness * p.antialias / 2
        self.reach = int(math.floor(r))
        span = range(-self.reach, self.reach + 1)
        self.brush = [(a, b) for a in span for b in span if a * a + b * b <= r * r] or [(0, 0)]
        # Flat base-pixel offsets the brush covers, per sub-pixel phase of the hi-res centre.
        aa = p.antialias
        self.brush_base = {
            (pr, pc): sorted({((pr + a) // aa) * self.width + (pc + b) // aa for a, b in self.brush})
            for pr in range(aa) for pc in range(aa)
        }
        square = range(-self.m, self.m + 1)
        self.dilation = [a * self.width + b for a in square for b in square]
        # Segments this close along the snake may touch it; older ones may not (no self-crossing).
        self.spacing = 1 + math.ceil((p.margin + 1 + p.thickness) / p.paddle_length)

    def flat(self, r: int, c: int) -> int:
        return (r + self.m) * self.width + c + self.m

    def unflat(self, i: int) -> tuple[int, int]:
        r, c = divmod(i, self.width)
        return r - self.m, c - self.m

    def segment_pixels(self, start: tuple[float, float], end: tuple[float, float]) -> tuple[set, set] | None:
        """(hi-res pen centres, flat base pixels) of a segment, or None if it leaves the allowed area.

        The base pixels are exactly those any brushed hi-res pixel falls in, so the stroke image
        equals the nonzero pixels of the rendered snake layer.
        """
        aa, reach = self.p.antialias, self.reach
        steps = max(1, math.ceil(math.dist(start, end) * aa * 2))  # <= half a hi-res pixel apart
        dr, dc = (end[0] - start[0]) * aa / steps, (end[1] - start[1]) * aa / steps
        r0, c0 = start[0] * aa, start[1] * aa
        centres = {(math.floor(r0 + dr * i), math.floor(c0 + dc * i)) for i in range(steps + 1)}
        lo, hi = self.lo * aa + reach, self.hi * aa - reach
        if any(not (lo <= r < hi and lo <= c < hi) for r, c in centres):
            return None
        w, m, brush = self.width, self.m, self.brush_base
        base = {(r // aa + m) * w + c // aa + m + o for r, c in centres for o in brush[(r % aa, c % aa)]}
        return centres, base

    def brushed(self, centres: set) -> set:
        return {(r + a, c + b) for r, c in centres for a, b in self.brush}

    def collides(self, base: set, bit: int, own: list, seg: int) -> bool:
        near, oldest = self.near, seg - self.spacing
        return any(near[i] & ~bit or own[i] < oldest for i in base)

    def stamp(self, base: set, bit: int, own: list, seg: int) -> set:
        touched = {i + o for i in base for o in self.dilation}
        near = self.near
        for i in touched:
            near[i] |= bit
            if own[i] > seg:
                own[i] = seg
        return touched

    def erase(self, touched: set, bit: int) -> None:
        for i in touched:
            self.near[i] &= ~bit


@dataclass
class _Snake:
    ident: int
    points: list[tuple[float, float]]
    own: list
    direction: float | None = None
    hires: set = field(default_factory=set)
    base: set = field(default_factory=set)
    touched: set = field(default_factory=set)

    @property
    def bit(self) -> int:
        return 1 << self.ident


def _extend(canvas: _Canvas, snake: _Snake, rng: random.Random) -> bool:
    """Add one segment, turning at most continuity * 45 degrees; False when no direction fits."""
    p = canvas.p
    max_turn = p.continuity * math.pi / 4
    seg = len(snake.points) - 1
    start = snake.points[-1]
    for _ in range(p.max_trials):
        if snake.direction is None:
            direction = rng.uniform(-math.pi, math.pi)
        else:
            direction = snake.direction + rng.uniform(-max_turn, max_turn)
        step = p.paddle_length
        end = (start[0] + step * math.sin(direction), start[1] + step * math.cos(direction))
        pixels = canvas.segment_pixels(start, end)
        if pixels is None or canvas.collides(pixels[1], snake.bit, snake.own, seg):
            continue
        snake.points.append(end)
        snake.direction = direction
        snake.hires |= canvas.brushed(pixels[0])
        snake.base |= pixels[1]
        snake.touched |= canvas.stamp(pixels[1], snake.bit, snake.own, seg)
        return True
    return False


def _grow(canvas: _Canvas, rng: random.Random, ident: int, start, length: int) -> _Snake | None:
    """A snake of ``length`` segments from ``start`` (a point or a callable drawing one), or None.

    A failed attempt erases only its own marks, so other snakes' work is kept.
    """
    for _ in range(canvas.p.max_trials):
        origin = start() if callable(start) else start
        snake = _Snake(ident, [origin], [1 << 30] * len(canvas.near))
        if all(_extend(canvas, snake, rng) for _ in range(length)):
            return snake
        canvas.erase(snake.touched, snake.bit)
    return None


def _free_point(canvas: _Canvas, rng: random.Random, inset: float = 0.0) -> tuple[float, float]:
    lo, hi = canvas.lo + inset, canvas.hi - inset
    if hi <= lo:
        lo, hi = canvas.lo, canvas.hi
    return rng.uniform(lo, hi), rng.uniform(lo, hi)


def _seeds(canvas: _Canvas, rng: random.Random) -> tuple[tuple[float, float], tuple[float, float]]:
    """Starts of the two target snakes, ``seed_distance`` apart; the first away from the border."""
    p = canvas.p
    for _ in range(1000):
        first = _free_point(canvas, rng, 2 * p.seed_distance - canvas.lo)
        angle = rng.uniform(-math.pi, math.pi)
        second = (first[0] + p.seed_distance * math.sin(angle), first[1] + p.seed_distance * math.cos(angle))
        if all(canvas.lo <= v < canvas.hi for v in second):
            return first, second
    raise _too_small(p)


def _too_small(p: PathfinderParams) -> DataError:
    return DataError(
        "pathfinder generator",
        f"two target snakes of {p.contour_length} segments do not fit a {p.resolution}x{p.resolution} image "
        f"(seed distance {p.seed_distance}, margin {p.margin})",
        "raise the resolution or lower contour_length / seed_distance",
    )


def _target_snakes(canvas: _Canvas, rng: random.Random) -> list[_Snake] | None:
    first, second = _seeds(canvas, rng)
    # Reserve the second seed so the first snake cannot run over it.
    reserved = canvas.stamp({canvas.flat(int(second[0]), int(second[1]))}, 1 << 1, [0] * len(canvas.near), 0)
    snake0 = _grow(canvas, rng, 0, first, canvas.p.contour_length)
    canvas.erase(reserved, 1 << 1)
    if snake0 is None:
        return None
    snake1 = _grow(canvas, rng, 1, second, canvas.p.contour_length)
    return None if snake1 is None else [snake0, snake1]


def _disk(center: tuple[float, float], radius: float, aa: int, size: int) -> np.ndarray:
    rows, cols = np.ogrid[:size, :size]
    cy, cx = center[0] * aa, center[1] * aa
    return (rows + 0.5 - cy) ** 2 + (cols + 0.5 - cx) ** 2 <= (radius * aa) ** 2


def _render(p: PathfinderParams, snakes: list[_Snake], ends: list[tuple[float, float]]) -> np.ndarray:
    aa, size = p.antialias, p.resolution * p.antialias
    hires = np.zeros((size, size), dtype=bool)
    for snake in snakes:
        rows, cols = zip(*snake.hires, strict=True)
        hires[list(rows), list(cols)] = True
    for end in ends:
        hires |= _disk(end, p.marker_radius, aa, size)
    # Box-filter the supersampled drawing down: the antialiasing of the original renderer.
    gray = hires.reshape(p.resolution, aa, p.resolution, aa).mean(axis=(1, 3))
    return np.rint(gray * 255).astype(np.uint8)


def render_sample(rng: random.Random, params: PathfinderParams, label: int) -> SampleTruth:
    """Draw one image: two target snakes, distractors, and markers placed according to ``label``."""
    for _ in range(1000):
        canvas = _Canvas(params)
        targets = _target_snakes(canvas, rng)
        if targets is not None:
            break
    else:
        raise _too_small(params)
    snakes = list(targets)
    for ident in range(2, 2 + params.num_distractors):
        # Crowded images keep fewer distractors, like the original's allow_incomplete.
        distractor = _grow(canvas, rng, ident, lambda: _free_point(canvas, rng), params.distractor_length)
        if distractor is not None:
            snakes.append(distractor)
    first = rng.randrange(2)
    other = first if label == 1 else 1 - first
    ends = [targets[first].points[0], targets[other].points[-1]]
    stroke_ids = np.full((params.resolution, params.resolution), -1, dtype=np.int16)
    for snake in snakes:
        rows, cols = zip(*(canvas.unflat(i) for i in snake.base), strict=True)
        stroke_ids[list(rows), list(cols)] = snake.ident
    markers = tuple((int(math.floor(e[0])), int(math.floor(e[1]))) for e in ends)
    return SampleTruth(
        label=label, image=_render(params, snakes, ends), strokes=stroke_ids >= 0, stroke_ids=stroke_ids,
        markers=markers, marker_snakes=(first, other),
        snake_ends=[(s.points[0], s.points[-1]) for s in targets],
    )


@dataclass
class GeneratedPathfinder:
    directory: Path
    labels: np.ndarray
    truth: list[SampleTruth]


def folder_name(contour_length: int) -> str:
    # LRA ships three difficulties; the easiest one is named "baseline" rather than by its length.
    return "curv_baseline" if contour_length == 6 else f"curv_contour_length_{contour_length}"


def generate_pathfinder(
    out_dir: str | Path,
    seed: int,
    n: int,
    resolution: int = 32,
    contour_length: int = 14,
    params: PathfinderParams | None = None,
    batch_size: int = 1000,
    keep_truth: bool = False,
) -> GeneratedPathfinder:
    """Write ``n`` images (exactly half positive) in the official layout under ``out_dir``.

    ``out_dir/pathfinder{resolution}/<curv_...>/imgs/<k>/sample_<i>.png`` plus ``metadata/<k>.npy``
    (text lines ``imgs/<k> sample_<i>.png <i> <label> <continuity> <contour_length> ...`` as the
    original writes them). With ``keep_truth`` the per-image ground truth is returned too.
    """
    p = params or default_params(resolution, contour_length)
    root = Path(out_dir) / f"pathfinder{p.resolution}" / folder_name(p.contour_length)
    rng = random.Random(seed)
    labels = np.array([1] * (n // 2) + [0] * (n - n // 2), dtype=np.int64)
    rng.shuffle(labels)  # balanced: exactly half the images are positive
    truth, lines = [], {}
    for index, label in enumerate(bar(labels, n, f"generating pathfinder{p.resolution}", "img")):
        batch, i = divmod(index, batch_size)
        sample = render_sample(rng, p, int(label))
        image_dir = root / "imgs" / str(batch)
        image_dir.mkdir(parents=True, exist_ok=True)
        Image.fromarray(sample.image).save(image_dir / f"sample_{i}.png")
        lines.setdefault(batch, []).append(
            f"imgs/{batch} sample_{i}.png {i} {label} {p.continuity} {p.contour_length} "
            f"{p.distractor_length} {p.paddle_length} {p.thickness} {p.margin} 1\n"
        )
        if keep_truth:
            truth.append(sample)
    (root / "metadata").mkdir(parents=True, exist_ok=True)
    for batch, batch_lines in lines.items():
        (root / "metadata" / f"{batch}.npy").write_text("".join(batch_lines))
    return GeneratedPathfinder(root, labels, truth)
