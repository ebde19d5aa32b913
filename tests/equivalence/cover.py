"""The CI subset of the layout-equivalence matrix: a greedy pairwise cover.
Every pair of values of two covered axes (layouts.AXES up to layouts.COVERED)
that a valid layout can hold appears in at least one chosen layout. The
candidates are seeded random layouts; which are valid is asked of `trident
check` (see selection.py)."""
import itertools
import random

import numpy as np

import layouts as L


def _pair_table():
    """Ids for every (axis i value a, axis j value b) with i < j."""
    ids, k = {}, 0
    for i, j in itertools.combinations(range(L.COVERED), 2):
        for a in range(len(L.AXES[i][1])):
            for b in range(len(L.AXES[j][1])):
                ids[(i, a, j, b)] = k
                k += 1
    return ids


PAIRS = _pair_table()
PAIR_NAMES = {k: f"{L.NAMES[i]}={L.AXES[i][1][a]} & {L.NAMES[j]}={L.AXES[j][1][b]}"
              for (i, a, j, b), k in PAIRS.items()}


def _value_indices(layout):
    return [L.AXES[i][1].index(x) for i, x in enumerate(layout)]


def pairs_of(layout):
    ix = _value_indices(layout)
    return [PAIRS[(i, ix[i], j, ix[j])] for i, j in itertools.combinations(range(L.COVERED), 2)]


def candidates(seed, random_count=1500, per_pair=10):
    """Layouts to ask the validator about: random ones plus, for every pair of
    values, a few random layouts holding that pair, so every pair that any valid
    layout can hold is likely found. At most L.MAX_RANKS ranks (a bound of the
    matrix, not a validity rule)."""
    rng = random.Random(seed)

    def draw(fixed):
        for _ in range(50):
            layout = tuple(fixed.get(i, rng.choice(vals) if i < L.COVERED else vals[0])
                           for i, (_, vals) in enumerate(L.AXES))
            if L.ranks(layout) <= L.MAX_RANKS:
                return layout
        return None

    out = [draw({}) for _ in range(random_count)]
    for (i, a, j, b) in PAIRS:
        out += [draw({i: L.AXES[i][1][a], j: L.AXES[j][1][b]}) for _ in range(per_pair)]
    return list(dict.fromkeys(x for x in out if x is not None))


def beyond_rank_bound(pair):
    (i, a, j, b), = [k for k, v in PAIRS.items() if v == pair]
    grid = {L.NAMES[i]: L.AXES[i][1][a], L.NAMES[j]: L.AXES[j][1][b]}
    return all(k in ("dp", "tp", "pp") for k in grid) and np.prod(list(grid.values())) > L.MAX_RANKS


def greedy_cover(valid, start=()):
    """Greedy set cover of every pair the valid layouts hold: take the layout
    that covers most uncovered pairs; ties go to fewer ranks (cheaper), then to
    the earlier candidate (deterministic for a fixed seed)."""
    table = np.array([pairs_of(x) for x in valid], dtype=np.int64)
    cost = np.array([L.ranks(x) for x in valid], dtype=np.int64)
    uncovered = np.zeros(len(PAIRS), dtype=bool)
    uncovered[np.unique(table)] = True
    chosen = list(start)
    for x in start:
        uncovered[pairs_of(x)] = False
    while uncovered.any():
        gain = uncovered[table].sum(axis=1)
        best = int(np.argmax(gain * 16 - cost))  # cost <= 8 < 16: gain first
        chosen.append(valid[best])
        uncovered[table[best]] = False
    return chosen


def uncoverable_pairs(valid):
    held = set()
    for x in valid:
        held.update(pairs_of(x))
    return [k for k in PAIRS.values() if k not in held]
