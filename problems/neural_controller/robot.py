"""The walking robot of neural_controller: unit squares of a grid joined into a 2D mass-spring body.

A square at grid cell (column i, row j) has corners (i, j), (i + 1, j), (i, j + 1), (i + 1, j + 1), placed at
``origin + spacing * (i, j)`` (m), and six springs: its four edges and both diagonals (an edge shared with a
neighbouring square is one spring). In an actuated square the two vertical edges are actuated springs (their
rest length follows the controller: DiffTaichi's mass_spring robots, ``add_mesh_square``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the default robot: two legs of two actuated squares each under a three-square back (DiffTaichi's robotC
# without its head column): (column, row, actuated)
DEFAULT_SQUARES: tuple[tuple[int, int, bool], ...] = (
    (0, 0, True), (0, 1, True), (0, 2, False), (1, 2, False), (2, 2, False), (2, 1, True), (2, 0, True))


@dataclass
class Robot:
    """``x0`` (N, 2) rest positions (m), ``springs`` (S, 2) particle pairs, ``actuators`` (A,) indices of the
    actuated springs among ``springs``."""

    x0: np.ndarray
    springs: np.ndarray
    actuators: np.ndarray

    @property
    def n_particles(self) -> int:
        return int(self.x0.shape[0])


def build_robot(squares: tuple[tuple[int, int, bool], ...] = DEFAULT_SQUARES, spacing: float = 0.05,
                origin: tuple[float, float] = (0.1, 0.1)) -> Robot:
    """The robot made of ``squares`` ((column, row, actuated) cells of side ``spacing`` m; the lowest row's
    bottom corners at height ``origin[1]``). ValueError for no squares, a square given twice, or
    ``spacing <= 0``."""
    if not squares:
        raise ValueError("build_robot: squares must name at least one (column, row, actuated) cell")
    if spacing <= 0:
        raise ValueError(f"build_robot: spacing must be > 0 m, got {spacing!r}")
    cells = [(int(i), int(j)) for i, j, _ in squares]
    if len(set(cells)) != len(cells):
        raise ValueError(f"build_robot: a square is given twice in {cells}")
    points: dict[tuple[int, int], int] = {}
    springs: dict[frozenset[int], tuple[int, bool]] = {}   # corner pair -> (spring index, actuated)

    def point(i: int, j: int) -> int:
        return points.setdefault((i, j), len(points))

    def spring(a: int, b: int, actuated: bool) -> None:
        key = frozenset((a, b))
        if key not in springs:
            springs[key] = (len(springs), actuated)

    for i, j, actuated in squares:
        a, b, c, d = point(i, j), point(i, j + 1), point(i + 1, j), point(i + 1, j + 1)
        spring(a, b, bool(actuated))      # left edge
        spring(c, d, bool(actuated))      # right edge
        for p, q in ((a, c), (b, d), (a, d), (b, c)):   # bottom, top, diagonals
            spring(p, q, False)
    x0 = np.zeros((len(points), 2))
    for (i, j), k in points.items():
        x0[k] = (origin[0] + spacing * i, origin[1] + spacing * j)
    pairs = np.zeros((len(springs), 2), np.int64)
    actuated_list = []
    for key, (s, actuated) in springs.items():
        pairs[s] = sorted(key)
        if actuated:
            actuated_list.append(s)
    return Robot(x0.astype(np.float32), pairs, np.array(sorted(actuated_list), np.int64))
