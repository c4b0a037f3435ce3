"""spfcore.sim._replay_classic_nb's rings (the classic kernels' orders) against a list model:
random appends, pushes to the front, removals, moves to the end, rotations and walks, and
a renumbering of the elements (r_remap) that keeps every ring's order."""
import numpy as np
import pytest

cn = pytest.importorskip("spfcore.sim._replay_classic_nb")


def ring_list(rings, r):
    rn, rp, rg, rl = rings
    R = len(rl)
    out, x = [], cn.r_first(rn, R, r)
    while x >= 0:
        out.append(x)
        x = cn.r_next(rn, R, x)
    back, x = [], cn.r_last(rp, R, r)
    while x >= 0:
        back.append(x)
        x = cn.r_prev(rp, R, x)
    assert back[::-1] == out and rl[r] == len(out) and all(rg[x] == r for x in out)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_rings_match_lists(seed):
    rng = np.random.default_rng(seed)
    R, n = 3, 40
    rings = cn.r_new(R, n)
    rn, rp, rg, rl = rings
    model = [[] for _ in range(R)]
    for _ in range(2000):
        x = int(rng.integers(n))
        r = int(rng.integers(R))
        op = int(rng.integers(5))
        where = next((q for q in range(R) if x in model[q]), None)
        if where is None:
            if op < 2:
                cn.r_append(rn, rp, rg, rl, r, x)
                model[r].append(x)
            else:
                cn.r_push_first(rn, rp, rg, rl, r, x)
                model[r].insert(0, x)
        elif op == 0:
            cn.r_remove(rn, rp, rg, rl, x)
            model[where].remove(x)
        elif op == 1:
            cn.r_move_to_end(rn, rp, rg, rl, x)
            model[where].remove(x)
            model[where].append(x)
        else:
            cn.r_rotate_to(rn, rp, R, where, x)
            i = model[where].index(x)
            model[where] = model[where][i:] + model[where][:i]
        for q in range(R):
            assert ring_list(rings, q) == model[q]
    # renumber: drop the elements in no ring, keep the order of each ring
    held = sorted(x for q in range(R) for x in model[q])
    km = np.full(n, -1, np.int64)
    km[held] = np.arange(len(held))
    new = cn.r_remap(rings, km, len(held))
    for q in range(R):
        assert ring_list(new, q) == [int(km[x]) for x in model[q]]
    grown = cn.r_grow(new, len(held) + 5)
    cn.r_append(grown[0], grown[1], grown[2], grown[3], 0, len(held) + 4)
    assert ring_list(grown, 0) == [int(km[x]) for x in model[0]] + [len(held) + 4]


def test_walk_takes_the_first_evictable_and_rotates():
    """walk: blocks 1..6 in one ring; 1 and 2 not free, 3 a parent (a cached child), 4 free leaf:
    4 is the victim and 1, 2, 3 move to the newest end; with none evictable the ring stays."""
    R, n = 1, 8
    rn, rp, rg, rl = rings = cn.r_new(R, n)
    for b in range(1, 7):
        cn.r_append(rn, rp, rg, rl, 0, b)
    key_of = np.arange(n, dtype=np.int64)
    kids = np.zeros(n, np.int64)
    kids[3] = 1
    kh = kt = np.arange(n, dtype=np.int32)
    fr = np.array([0, 0, 0, 1, 1, 1, 1, 0], np.uint8)
    assert cn.walk(rn, rp, R, 0, fr, key_of, kids, kh, kt, False) == 4
    assert ring_list(rings, 0) == [4, 5, 6, 1, 2, 3]
    fr[:] = 0
    fr[3] = 1
    assert cn.walk(rn, rp, R, 0, fr, key_of, kids, kh, kt, False) == -1
    assert ring_list(rings, 0) == [4, 5, 6, 1, 2, 3]
    kt = kh.copy()
    kt[3] = 7  # key 3 held by two cached blocks: with copies, block 3 counts as a leaf
    assert cn.walk(rn, rp, R, 0, fr, key_of, kids, kh, kt, True) == 3
    assert ring_list(rings, 0) == [3, 4, 5, 6, 1, 2]
