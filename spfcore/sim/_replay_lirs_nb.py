"""The sequential replay of the ``lirs`` arm (``spfcore_classic.lirs.LIRS``,
the classic plugin's LIRS in policy-ordered mode) as one numba-compiled loop
over int arrays: the same decisions and the same counts as
:func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with the plugin's hooks (see
:mod:`spfcore_classic._base` for the chain mapping and
:mod:`spfcore_classic.lirs` for the algorithm).

A :data:`spfcore.sim.simulator.KERNELS` module, on the pool of
:mod:`spfcore.sim._replay_nb` and the chain bookkeeping and rings of
:mod:`spfcore.sim._replay_classic_nb` (the runtime order per request is
:mod:`spfcore.sim._replay_arc_nb`'s). The plugin's structures, over ints:

* the stack S (``LIRS.S``, an ordered dict of tokens, first = bottom): ring 0
  of the ring set ``sr`` over ``B + K`` elements: a resident block's token is
  element ``b`` (a block has one token while resident, ``LIRS.tok``), a
  non-resident HIR entry of key ``k`` (``LIRS.ghost_tok``, one per hash) is
  element ``B + k``. A block evicted while its token is in S leaves its key's
  element in its place (the token stays, :func:`_replace`);
* the queue Q (``LIRS.Q``, resident HIR blocks, first = front): ring 0 of the
  block ring set ``qr``; the LIR set ``LIRS.lir``: ``lir[b]``;
* ``LIRS.nonres`` (ghost keys in the order they left): ring 0 of the key ring
  set ``nr``; a key is on it exactly while its element is in S;
* tokens are told apart by a version per key (``gv[k]``, bumped when a new
  ghost token of ``k`` is made): ``LIRS.from_ghost`` (this request's prompt
  keys with a ghost, and that ghost's token) is ``fs[k] == pc[STAMP]`` with
  ``fv[k]`` the version;
* ``LIRS.borrowed``, ``hir_cap``, ``lir_cap``, the capacity: ``pc``.

The plugin's walk memory only saves passes: the walks here are the plain
walk (:func:`spfcore.sim._replay_classic_nb.walk`).
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim import _replay_classic_nb as cl
from spfcore.sim._replay_classic_nb import (evictable, r_append, r_grow, r_move_to_end, r_new, r_remap, r_remove,
                                            stored, unparent, walk)
from spfcore.sim._replay_nb import (EVICT_CALLS, EVICTIONS, HSN, LRUN, NCOUNTERS, NVICT, _insert, _lookup,  # noqa: F401
                                    _retire, init, warm_trace)

#: More counter indices (after ``_replay_nb``'s first five): hook calls, the block a lookup
#: found twice, the request a status names, victims found by the copies rule.
HOOK_CALLS, TWICE, AT, COPIES = range(NCOUNTERS, NCOUNTERS + 4)
NCOUNTERS_L = NCOUNTERS + 4
#: :func:`replay_lirs` status: done, a request too big, a lookup found a block twice, no evictable block.
DONE, TOO_BIG, FOUND_TWICE, NO_VICTIM = range(4)
#: Policy scalars ``pc``: capacity, HIR and LIR caps, borrowed LIR slots, LIR blocks, the request stamp.
CAP, HIR_CAP, LIR_CAP, BORROWED, NLIR, STAMP = range(6)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _replace(rn, rp, rg, rl, x, y):
    """Element ``y`` (in no ring) takes element ``x``'s place in its ring."""
    R = len(rl)
    sx, sy = R + x, R + y
    p, q = rp[sx], rn[sx]
    rn[p] = sy
    rp[q] = sy
    rn[sy] = q
    rp[sy] = p
    rg[y] = rg[x]
    rg[x] = -1


@_jit
def _s_drop(e, B, srn, srp, srg, srl, nrn, nrp, nrg, nrl):
    """Token element ``e`` leaves S; a ghost's key leaves ``nonres`` too."""
    r_remove(srn, srp, srg, srl, e)
    if e >= B:
        r_remove(nrn, nrp, nrg, nrl, e - B)


@_jit
def _prune(B, lir, srn, srp, srg, srl, nrn, nrp, nrg, nrl):
    """``LIRS._prune``: S's bottom entries that are not LIR blocks leave it."""
    while srl[0]:
        e = srn[0] - 1
        if e < B and lir[e]:
            return
        _s_drop(e, B, srn, srp, srg, srl, nrn, nrp, nrg, nrl)


@_jit
def _limit(B, srn, srp, srg, srl, nrn, nrp, nrg, nrl, pc):
    """``LIRS._limit``: the oldest ghosts go while S holds more than twice the blocks."""
    while srl[0] > 2 * pc[CAP] and nrl[0]:
        k = nrn[0] - 1
        r_remove(nrn, nrp, nrg, nrl, k)
        r_remove(srn, srp, srg, srl, B + k)


@_jit
def _demote_excess(B, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, pc):
    """``LIRS._demote_excess``: borrowed slots refilled by promotions; S's bottom LIR blocks
    beyond the LIR cap go to Q's end."""
    room = pc[LIR_CAP] - pc[NLIR]
    if room < 0:
        room = 0
    if room < pc[BORROWED]:
        pc[BORROWED] = room
    while pc[NLIR] > pc[LIR_CAP]:
        i = srn[0] - 1  # pruned: the bottom is LIR
        lir[i] = 0
        pc[NLIR] -= 1
        r_remove(srn, srp, srg, srl, i)
        r_append(qrn, qrp, qrg, qrl, 0, i)
        _prune(B, lir, srn, srp, srg, srl, nrn, nrp, nrg, nrl)


@_jit
def _hit(i, B, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, pc):
    """``LIRS._hit`` of resident block ``i``."""
    if lir[i]:
        r_move_to_end(srn, srp, srg, srl, i)
        _prune(B, lir, srn, srp, srg, srl, nrn, nrp, nrg, nrl)
    elif srg[i] >= 0:
        r_move_to_end(srn, srp, srg, srl, i)
        r_remove(qrn, qrp, qrg, qrl, i)
        lir[i] = 1
        pc[NLIR] += 1
        _demote_excess(B, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, pc)
    else:
        r_append(srn, srp, srg, srl, 0, i)
        r_move_to_end(qrn, qrp, qrg, qrl, i)
    if srl[0] > 2 * pc[CAP]:
        _limit(B, srn, srp, srg, srl, nrn, nrp, nrg, nrl, pc)


@_jit
def _on_miss(bk, lo, hi, B, srg, gv, fs, fv, pc):
    """``LIRS.on_miss``: the prompt's keys (after its hits) with a ghost in S, with its token."""
    pc[STAMP] += 1
    s = pc[STAMP]
    for j in range(lo, hi):
        k = bk[j]
        if srg[B + k] >= 0:
            fs[k] = s
            fv[k] = gv[k]


@_jit
def _on_inserts(blocks, lo, n, B, key_of, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl,
                gv, fs, fv, pc):
    """``LIRS.on_inserts`` of ``blocks[lo:lo + n]`` (deepest first here)."""
    s = pc[STAMP]
    slow = False
    for j in range(lo, lo + n):
        if fs[key_of[blocks[j]]] == s:
            slow = True
            break
    if not slow:  # no block back from a ghost: new HIR/LIR blocks on top of S
        room = pc[LIR_CAP] - pc[BORROWED] - pc[NLIR]
        for j in range(lo + n - 1, lo - 1, -1):
            i = blocks[j]
            r_append(srn, srp, srg, srl, 0, i)
            if room > 0:
                lir[i] = 1
                pc[NLIR] += 1
                room -= 1
            else:
                r_append(qrn, qrp, qrg, qrl, 0, i)
        if srl[0] > 2 * pc[CAP]:
            _limit(B, srn, srp, srg, srl, nrn, nrp, nrg, nrl, pc)
        return
    for j in range(lo + n - 1, lo - 1, -1):  # LIRS._insert, block by block
        i = blocks[j]
        k = key_of[i]
        back = fs[k] == s
        fs[k] = 0  # (from_ghost.pop)
        if back and srg[B + k] >= 0 and gv[k] == fv[k]:  # its ghost, the same token, still in S
            r_remove(nrn, nrp, nrg, nrl, k)
            _replace(srn, srp, srg, srl, B + k, i)
            r_move_to_end(srn, srp, srg, srl, i)
            lir[i] = 1
            pc[NLIR] += 1
            _demote_excess(B, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, pc)
        else:
            r_append(srn, srp, srg, srl, 0, i)
            if pc[NLIR] < pc[LIR_CAP] - pc[BORROWED]:
                lir[i] = 1
                pc[NLIR] += 1
            else:
                r_append(qrn, qrp, qrg, qrl, 0, i)
        _limit(B, srn, srp, srg, srl, nrn, nrp, nrg, nrl, pc)


@_jit
def _victim(copies, B, key_of, kh, kt, kids, fr, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl,
            gv, pc):
    """``LIRS.victim``: Q's first evictable block, else S's lowest evictable
    resident block (a borrowed LIR slot); its token becomes its key's ghost if
    it stays in S. -1 with nothing changed if none (``copies``: the copies rule)."""
    i = walk(qrn, qrp, 1, 0, fr, key_of, kids, kh, kt, copies)
    if i >= 0:
        r_remove(qrn, qrp, qrg, qrl, i)
    else:
        s = srn[0]
        i = -1
        while s != 0:
            e = s - 1
            if e < B and evictable(e, fr, key_of, kids, kh, kt, copies):
                i = e
                break
            s = srn[s]
        if i < 0:
            return -1
        if lir[i]:
            lir[i] = 0
            pc[NLIR] -= 1
        pc[BORROWED] += 1
        r_remove(srn, srp, srg, srl, i)
    if srg[i] >= 0:  # its token stays in S, now its key's (one ghost per hash: an older one goes)
        k = key_of[i]
        if srg[B + k] >= 0:
            r_remove(srn, srp, srg, srl, B + k)
        _replace(srn, srp, srg, srl, i, B + k)
        gv[k] += 1
        if nrg[k] < 0:  # (an OrderedDict assignment leaves a present key where it is)
            r_append(nrn, nrp, nrg, nrl, 0, k)
    _prune(B, lir, srn, srp, srg, srl, nrn, nrp, nrg, nrl)
    return i


@_jit
def _alloc(n, blocks, at, B, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, lir, srn, srp, srg, srl, qrn, qrp, qrg,
           qrl, nrn, nrp, nrg, nrl, gv, pc, c, victims):
    """``PolicyRuntime.evict(n)`` into ``blocks[at:at + n]``: hashless blocks
    first, then one ``spfcore_evict_blocks`` call for the rest (each victim
    from :func:`_victim`, else with the copies rule). False if none found."""
    c[EVICT_CALLS] += 1
    got = 0
    while c[HSN] > 0 and got < n:
        c[HSN] -= 1
        b = hs[c[HSN]]
        blocks[at + got] = b
        _retire(b, key_of, kh, kt, dn, dp, c, victims)
        got += 1
    if got == n:
        return True
    c[HOOK_CALLS] += 1
    for j in range(got, n):
        i = _victim(False, B, key_of, kh, kt, kids, fr, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg,
                    nrl, gv, pc)
        if i < 0:
            i = _victim(True, B, key_of, kh, kt, kids, fr, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp,
                        nrg, nrl, gv, pc)
            if i < 0:
                return False
            c[COPIES] += 1
        unparent(i, par_of, kids)
        fr[i] = 0
        c[LRUN] -= 1
        blocks[at + j] = i
        _retire(i, key_of, kh, kt, dn, dp, c, victims)
    return True


@_jit
def _store(blocks, lo, n, parent, keys, k0, B, key_of, kh, kt, dn, dp, par_of, kids, lir, srn, srp, srg, srl,
           qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, gv, fs, fv, pc, c):
    """``PolicyRuntime.stored`` of ``blocks[lo:lo + n]`` (keys ``keys[k0:k0 + n]``, the first
    one's parent key id ``parent``): cached, counted as children, one store call, ``on_inserts``."""
    for j in range(n):
        b = blocks[lo + j]
        k = keys[k0 + j]
        _insert(b, k, key_of, kh, kt, dn, dp)
        stored(b, parent, key_of, par_of, kids)
        parent = k
    c[HOOK_CALLS] += 1
    _on_inserts(blocks, lo, n, B, key_of, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl,
                gv, fs, fv, pc)


@_jit
def replay_lirs(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, key_of, kh, kt, dn, dp, hs, par_of, kids,
                fr, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, gv, fs, fv, pc, c, blocks, hits,
                victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` (the request arrays of
    :func:`spfcore.sim._replay_nb.replay`) under LIRS; statuses as
    :func:`spfcore.sim._replay_arc_nb.replay_arc`'s."""
    B = len(key_of)
    for r in range(len(n_prompt)):
        f0 = bk_off[r]
        f1 = bk_off[r + 1]
        nf = nf_[r]
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + c[LRUN]:
            c[AT] = r
            return TOO_BIG
        c[HOOK_CALLS] += 2  # spfcore_request_arrived, spfcore_blocks_hit
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        for j in range(h - 1, -1, -1):  # on_hits, deepest first
            _hit(blocks[j], B, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, pc)
        _on_miss(bk, f0 + h, f1, B, srg, gv, fs, fv, pc)
        for j in range(h):  # touch
            b = blocks[j]
            if not fr[b]:
                c[TWICE] = b
                c[AT] = r
                return FOUND_TWICE
            fr[b] = 0
            c[LRUN] -= 1
        if not _alloc(np_ - h, blocks, h, B, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, lir, srn, srp, srg, srl,
                      qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, gv, pc, c, victims):
            c[AT] = r
            return NO_VICTIM
        if nf > h:
            par = bk[f0 + h - 1] if h else -1
            _store(blocks, h, nf - h, par, bk, f0 + h, B, key_of, kh, kt, dn, dp, par_of,
                   kids, lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, gv, fs, fv, pc, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        done = nf
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + nd
            parent = bk[f0 + nf - 1] if nf else -1
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _store(blocks, done, 1, parent, dk, d0 + done - nf, B, key_of, kh, kt, dn, dp, par_of, kids,
                           lir, srn, srp, srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, gv, fs, fv, pc, c)
                    parent = dk[d0 + done - nf]
                    done += 1
                if j < nt:
                    if not _alloc(1, blocks, nb_, B, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, lir, srn, srp,
                                  srg, srl, qrn, qrp, qrg, qrl, nrn, nrp, nrg, nrl, gv, pc, c, victims):
                        c[AT] = r
                        return NO_VICTIM
                    nb_ += 1
        for j in range(done):  # release
            fr[blocks[j]] = 1
        c[LRUN] += done
        for j in range(done, nb_):
            hs[c[HSN]] = blocks[j]
            c[HSN] += 1
        hits[r] = h
    return DONE


def params_of(rt) -> tuple | None:
    """``(hir_cap, lir_cap)`` of ``rt``'s policy if it is the plugin's own
    ``LIRS`` (no parameters; its caps from ``configure``), configured for
    ``rt``'s pool and fresh, else ``None`` (the hooks run)."""
    from spfcore_classic._base import NoParams
    from spfcore_classic.lirs import LIRS

    plugins = rt.pm.get_plugins()
    inst = next(iter(plugins)) if len(plugins) == 1 else None
    if type(inst) is not LIRS or type(inst.params) is not NoParams:
        return None
    if inst.capacity != rt.num_blocks or inst.n_req or inst.key or inst.S or inst.Q or inst.borrowed:
        return None
    return int(inst.hir_cap), int(inst.lir_cap)


def ghost_cap(st: dict) -> int:
    """Key ids the state may name beyond the cached blocks' (ghosts in S,
    which ``_limit`` bounds by twice the blocks): ``2 * num_blocks``."""
    return 2 * int(st["pc"][CAP])


def new_state(num_blocks: int, params: tuple, nkeys: int = 0) -> dict:
    """A fresh state for :func:`replay_lirs` (``params = (hir_cap, lir_cap)``):
    per block ``key_of``, ``par_of``, ``fr``, ``lir``, the pool's
    ``dn``/``dp``/``hs``; per key id ``kh``/``kt`` (int32), ``kids``, ``gv``
    (ghost token version), ``fs``/``fv`` (``from_ghost``: stamp, version);
    rings ``sr`` (S, over ``B + K`` elements), ``qr`` (Q, over blocks), ``nr``
    (``nonres``, over key ids); ``pc`` the policy's scalars; ``c`` counters."""
    i64 = np.int64
    st = {"key_of": np.full(num_blocks, -1, i64), "dn": np.full(num_blocks, -1, i64),
          "dp": np.full(num_blocks, -1, i64), "hs": np.zeros(num_blocks, i64), "par_of": np.full(num_blocks, -1, i64),
          "fr": np.zeros(num_blocks, i64), "lir": np.zeros(num_blocks, i64),
          "kh": np.full(nkeys, -1, np.int32), "kt": np.full(nkeys, -1, np.int32), "kids": np.zeros(nkeys, i64),
          "gv": np.zeros(nkeys, i64), "fs": np.zeros(nkeys, i64), "fv": np.zeros(nkeys, i64),
          "sr": r_new(1, num_blocks + nkeys), "qr": r_new(1, num_blocks), "nr": r_new(1, nkeys)}
    pc = np.zeros(6, i64)
    pc[CAP] = num_blocks
    pc[HIR_CAP], pc[LIR_CAP] = params
    st["pc"] = pc
    c = np.zeros(NCOUNTERS_L, i64)
    init(num_blocks, np.zeros(num_blocks, i64), np.zeros(num_blocks, i64), st["hs"], c)
    st["c"] = c
    return st


def grow(st: dict, nkeys: int) -> None:
    """Room for key ids below ``nkeys`` (doubling)."""
    have = len(st["kh"])
    if nkeys <= have:
        return
    g = max(nkeys, 2 * have, 1024) - have
    for name, fill in (("kh", -1), ("kt", -1), ("kids", 0), ("gv", 0), ("fs", 0), ("fv", 0)):
        a = st[name]
        st[name] = np.concatenate([a, np.full(g, fill, a.dtype)])
    st["sr"] = r_grow(st["sr"], len(st["key_of"]) + have + g)
    st["nr"] = r_grow(st["nr"], have + g)


_ARGS = ("key_of", "kh", "kt", "dn", "dp", "hs", "par_of", "kids", "fr", "lir")


def run(st: dict, flat: tuple, first_arrival: int, hits: np.ndarray, victims: np.ndarray) -> int:
    """Replay one chunk (key ids below ``len(st["kh"])``) into ``hits`` and
    ``victims``; ``first_arrival`` is not read. Returns :func:`replay_lirs`'s status."""
    n_total = flat[7]
    if not len(n_total):
        return DONE
    blocks = np.empty(int(n_total.max()), np.int64)
    status = replay_lirs(*flat, *(st[a] for a in _ARGS), *st["sr"], *st["qr"], *st["nr"], st["gv"], st["fs"], st["fv"],
                       st["pc"], st["c"], blocks, hits, victims)
    if status == NO_VICTIM:
        raise cl.no_victim('lirs', st, 'lirs: no evictable block')
    return status


def keep_keys(st: dict) -> np.ndarray:
    """Per key id, whether the state still names it: cached, a ghost in S
    (on ``nonres``), or the parent of a cached block."""
    return (st["kh"] >= 0) | (st["nr"][2] >= 0) | (st["kids"] > 0)


def remap(st: dict, keep: np.ndarray) -> np.ndarray:
    """Renumber the key ids ``keep`` marks densely from 0 and forget the
    others (S and ``nonres`` keep their orders; ``fs`` cleared: a past
    request's). Returns the old -> new map (-1: forgotten)."""
    old = np.flatnonzero(keep)
    m = len(old)
    size = len(keep)
    km = np.full(size, -1, np.int64)
    km[old] = np.arange(m)
    for name in ("key_of", "par_of"):
        a = st[name]
        held = a >= 0
        a[held] = km[a[held]]
    for name, fill in (("kh", -1), ("kt", -1), ("kids", 0), ("gv", 0)):
        a = np.full(size, fill, st[name].dtype)
        a[:m] = st[name][old]
        st[name] = a
    st["fs"], st["fv"] = np.zeros(size, np.int64), np.zeros(size, np.int64)
    B = len(st["key_of"])
    ks = np.concatenate([np.arange(B), np.where(km >= 0, km + B, -1)])
    st["sr"] = r_grow(r_remap(st["sr"], ks, B + m), B + size)
    st["nr"] = r_grow(r_remap(st["nr"], km, m), size)
    return km


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the
    simulator uses: compiles it (or loads numba's on-disk cache) now."""
    trace, _ = warm_trace()
    nb = 8
    st = new_state(nb, (1, 7), 4)
    i64 = np.int64
    run(st, trace, 0, np.empty(2, i64), np.empty(8, i64))
    keep_keys(st)
