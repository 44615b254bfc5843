"""Blend index maps: which dataset, and which of its samples, fills each blend position.

Megatron-Core's greedy rule, bit for bit: for s = 0 .. size-1, with
`err_j = w_j * max(s, 1.0) - count_j` in float64, pick the first j with the strictly largest error,
emit `(j, count_j)` and increment `count_j`. The exhaustive variant draws exactly `sizes[j]`
samples of each dataset, choosing among the datasets not yet exhausted.

Three exact implementations (and a grouping of equal weights, below):

* a plain scan, O(size x datasets): for 2-4 datasets the counts live in registers (~2 ns per
  position, several times Megatron's C++ loop); the sized blend uses it below `BLOCK_THRESHOLD`
  datasets, the exhaustive blend below `TREE_THRESHOLD`;
* a blocked candidate simulation (sized blend from `BLOCK_THRESHOLD` datasets), ~O(size x
  n**(1/3)) for n datasets. For fixed w_j >= 0 and count c_j the float64 error
  fl(fl(w_j * max(s, 1)) - c_j) is non-decreasing in s (rounding is monotone), so over a block of
  steps in which j is not picked, U_j = its error at the block's last step bounds all its errors.
  One pass computes U_j; the candidates are the j with U_j >= theta (kept in increasing j), and the
  block is simulated among them only, with the scan's exact expression. A simulated step is kept
  only while the winner's error is >= theta, i.e. strictly above every non-candidate's error: the
  candidate winner is then the scan's winner, tie-break included. A block ends at its first
  unproven step; a block with none takes one exact full step. theta = last winning error - delta,
  delta adapted to keep ~2x the block length in candidates. Two levels: outer blocks select
  candidates among all datasets, inner blocks among the outer candidates (`block_sizes`).
  Heavy datasets (drawn about once in four inner blocks or more, `heavy_datasets`) are
  candidates throughout and do not set theta: their errors jump by their weight each step;
* a kinetic tournament tree, O(size x log datasets) amortized. Each internal node keeps the winner
  of its two children and a *certificate*: the first step at which the float64 comparison could
  change. Between two datasets x (winning) and y, the exact difference of their errors is linear
  in s, `D(s) = (w_x - w_y) s - (c_x - c_y)`, and each float64 error is within
  `2**-52 (w s + c)` of its exact value; while `D(s)` exceeds a generous bound
  `2**-40 (w_x s + w_y s + c_x + c_y + 1)` the float comparison provably picks x. A node is
  re-evaluated exactly (in float64, same expression, same tie-break: left subtree = smaller ids)
  when its certificate expires or a count below it changes, so the result equals the scan's.

Ties are common in real blends (equal weights; weights proportional to equal dataset sizes) and
are the candidate methods' worst case (every tied dataset is a candidate). Datasets with bit-equal
weights are therefore merged into one competitor when there are few distinct weights
(`GROUP_THRESHOLD`): within such a group the counts differ by at most one, the members still at
the lower count share the group's largest error, and the smallest index among them wins, so the
group's members are drawn round-robin in index order and the group competes with its error
`fl(w * max(s, 1) - round)` and that member's index (the scan's first-index tie-break across
groups). Exact while the errors of counts one apart cannot round to the same float64
(`w * size + size < 2**50`).

The tree is kept for the exhaustive blend from `TREE_THRESHOLD` datasets (the blocked simulation
does not handle exhaustion) and as an explicit `method="tree"`.

Dataset ids are int16 below 32767 datasets (Megatron's dtype) and int32 above (beyond Megatron).
"""

from __future__ import annotations

import numba
import numpy as np

from jaxblend.validation import require_choice, require_int

#: Number of datasets from which the tree beats the plain scan (measured here: equal at ~1,000,
#: tree 3x faster at 4,000).
TREE_THRESHOLD = 1024

#: Number of datasets from which the blocked simulation beats the plain scan in the sized blend
#: (measured here, under load: 36 vs 44 ns/position at 16 datasets, 47 vs 760 ns at 1,000).
BLOCK_THRESHOLD = 16


#: A dataset is heavy for the block method when it takes at least this share of an inner block.
HEAVY_SHARE = 0.25

#: Weights closer than this relative spread (but not equal) make nearly every dataset a block
#: candidate; the tree is faster there (1,000 datasets, spread 1e-4: tree 99 vs block 293
#: ns/position; 1e-2: 254 vs 73).
NEAR_EQUAL_SPREAD = 1e-3

#: Largest number of distinct weights for which bit-equal weights are merged into groups and the
#: groups scanned (one group: ~2 ns per position; the scan costs ~1 ns per group and position).
GROUP_THRESHOLD = 32


def block_sizes(num_datasets: int) -> tuple[int, int]:
    """Outer and inner block lengths (steps) of the "block" method for `num_datasets`.

    Per position the method costs ~ n / outer (pass over all datasets) + 2 outer / inner (pass
    over the outer candidates) + 2 inner (simulation among the inner candidates); this is balanced
    at inner ~ sqrt(outer), outer ~ (n / 2) ** (2 / 3). Measured optima here: (64, 16) for 1,000
    datasets, (1,024-2,048, 32-64) for 100,000.
    """
    outer = int((num_datasets / 2.0) ** (2.0 / 3.0))
    inner = max(16, int(np.sqrt(outer)))
    return max(outer, 2 * inner), inner


def heavy_datasets(weights: np.ndarray, inner: int) -> np.ndarray:
    """Datasets the block method keeps as candidates throughout: drawn ~once in 4 inner blocks.

    Measured at 1,000 Zipf weights (8 heavy datasets): ~10% faster; no change for weights
    without a heavy head (none is heavy).
    """
    return weights * inner >= HEAVY_SHARE * weights.sum()


def dataset_index_dtype(num_datasets: int) -> np.dtype:
    """int16 below 32767 datasets (Megatron's dtype), else int32."""
    return np.dtype(np.int16) if num_datasets < 32767 else np.dtype(np.int32)


@numba.njit(cache=True, nogil=True)
def _scan_kernel(weights, size, dataset_index, dataset_sample_index):  # pragma: no cover
    n = weights.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    for s in range(size):
        sd = max(float(s), 1.0)
        best = 0
        best_err = weights[0] * sd - float(counts[0])
        for j in range(1, n):
            err = weights[j] * sd - float(counts[j])
            if err > best_err:
                best_err = err
                best = j
        dataset_index[s] = best
        dataset_sample_index[s] = counts[best]
        counts[best] += 1


@numba.njit(cache=True, nogil=True)
def _scan4_kernel(weights, size, dataset_index, dataset_sample_index):  # pragma: no cover
    # The scan for 2-4 datasets with the counts held in registers (weights padded with -1.0,
    # whose errors are always below a real dataset's: they are never picked).
    w0 = weights[0]
    w1 = weights[1]
    w2 = weights[2]
    w3 = weights[3]
    c0 = 0.0
    c1 = 0.0
    c2 = 0.0
    c3 = 0.0
    for s in range(size):
        sd = max(float(s), 1.0)
        best = 0
        best_err = w0 * sd - c0
        err = w1 * sd - c1
        if err > best_err:
            best = 1
            best_err = err
        err = w2 * sd - c2
        if err > best_err:
            best = 2
            best_err = err
        err = w3 * sd - c3
        if err > best_err:
            best = 3
        dataset_index[s] = best
        if best == 0:
            dataset_sample_index[s] = np.int64(c0)
            c0 += 1.0
        elif best == 1:
            dataset_sample_index[s] = np.int64(c1)
            c1 += 1.0
        elif best == 2:
            dataset_sample_index[s] = np.int64(c2)
            c2 += 1.0
        else:
            dataset_sample_index[s] = np.int64(c3)
            c3 += 1.0


@numba.njit(cache=True, nogil=True, inline="always")
def _max_of(buf, m):  # pragma: no cover
    # Maximum of buf[:m] with eight independent chains (max is exact in any order).
    r0 = -np.inf
    r1 = -np.inf
    r2 = -np.inf
    r3 = -np.inf
    r4 = -np.inf
    r5 = -np.inf
    r6 = -np.inf
    r7 = -np.inf
    i = 0
    while i + 8 <= m:
        r0 = max(r0, buf[i])
        r1 = max(r1, buf[i + 1])
        r2 = max(r2, buf[i + 2])
        r3 = max(r3, buf[i + 3])
        r4 = max(r4, buf[i + 4])
        r5 = max(r5, buf[i + 5])
        r6 = max(r6, buf[i + 6])
        r7 = max(r7, buf[i + 7])
        i += 8
    while i < m:
        r0 = max(r0, buf[i])
        i += 1
    return max(max(max(r0, r1), max(r2, r3)), max(max(r4, r5), max(r6, r7)))


@numba.njit(cache=True, nogil=True, inline="always")
def _pick(errs, m, bound):  # pragma: no cover
    # First index of the largest of errs[:m] if that error is >= bound, else -1.
    best_err = _max_of(errs, m)
    if not best_err >= bound:
        return -1, best_err
    b = 0
    while errs[b] != best_err:
        b += 1
    return b, best_err


@numba.njit(cache=True, nogil=True, inline="always")
def _pick_at_step(w, k, m, s, bound, errs):  # pragma: no cover
    # `_pick` over the errors at step s of the m candidates with weights w[:m] and counts k[:m].
    sd = max(float(s), 1.0)
    for i in range(m):
        errs[i] = w[i] * sd - k[i]
    return _pick(errs, m, bound)


@numba.njit(cache=True, nogil=True, inline="always")
def _candidates(w, k, heavy, m, end, theta, ids, w_out, k_out, heavy_out):  # pragma: no cover
    # The candidates among the first m for the steps before `end`: those whose error at step
    # end - 1 is >= theta, and the heavy ones. Their positions go to ids, their weights, counts
    # and heaviness to the *_out arrays (in increasing order); returns how many there are.
    sd = max(float(end - 1), 1.0)
    count = 0
    for i in range(m):
        ids[count] = i
        count += (w[i] * sd - k[i] >= theta) | heavy[i]
    for i in range(count):
        w_out[i] = w[ids[i]]
        k_out[i] = k[ids[i]]
        heavy_out[i] = heavy[ids[i]]
    return count


@numba.njit(cache=True, nogil=True, inline="always")
def _draw(
    s, dataset, b, k, heavy, err, level, dataset_index, dataset_sample_index
):  # pragma: no cover
    # Step s draws the next sample of `dataset` (candidate b, count k[b]); returns the new level
    # (the winning error, unless the winner is heavy: see `_block_kernel`).
    dataset_index[s] = dataset
    dataset_sample_index[s] = np.int64(k[b])
    k[b] += 1.0
    return level if heavy[b] else err


@numba.njit(cache=True, nogil=True)
def _block_kernel(
    weights, size, outer, inner, heavy, dataset_index, dataset_sample_index
):  # pragma: no cover
    # Blocked candidate simulation on two levels (see the module docstring). An outer block of
    # `outer` steps keeps the candidates T1 = {j : U_j >= theta1} of all datasets; inner blocks of
    # `inner` steps keep T2 = {i in T1 : U_i >= theta2} and simulate among T2. A step is proven
    # when the winner's error is >= max(theta1, theta2): every dataset outside T2 is then strictly
    # below it for the whole inner block. Candidate lists are in increasing dataset order.
    # Heavy datasets (heavy[j]) are always candidates, and only light winners set `level`:
    # a heavy dataset's error jumps by its weight every step, and thresholds taken from its
    # winning errors would sit above the light datasets' and prove nothing.
    n = weights.shape[0]
    counts = np.zeros(n, dtype=np.float64)
    ids1 = np.empty(n, dtype=np.int64)
    w1 = np.empty(n, dtype=np.float64)
    k1 = np.empty(n, dtype=np.float64)
    h1 = np.empty(n, dtype=np.bool_)
    ids2 = np.empty(n, dtype=np.int64)
    w2 = np.empty(n, dtype=np.float64)
    k2 = np.empty(n, dtype=np.float64)
    h2 = np.empty(n, dtype=np.bool_)
    errs = np.empty(n, dtype=np.float64)
    wsum = 0.0
    for j in range(n):
        wsum += weights[j]
    # theta = (last winning error) - delta; delta adapts to keep ~2 x block candidates.
    delta1 = 4.0 * outer * wsum / n
    delta2 = 4.0 * inner * wsum / n
    level = 0.0
    s = 0
    while s < size:
        end1 = min(s + outer, size)
        theta1 = level - delta1
        m1 = _candidates(weights, counts, heavy, n, end1, theta1, ids1, w1, k1, h1)
        start1 = s
        while s < end1 and m1 > 0:
            end2 = min(s + inner, end1)
            theta2 = level - delta2
            m2 = _candidates(w1, k1, h1, m1, end2, theta2, ids2, w2, k2, h2)
            bound = max(theta1, theta2)
            start2 = s
            while s < end2 and m2 > 0:
                b, best_err = _pick_at_step(w2, k2, m2, s, bound, errs)
                if b < 0:
                    break
                level = _draw(
                    s, ids1[ids2[b]], b, k2, h2, best_err, level, dataset_index,
                    dataset_sample_index,
                )
                s += 1
            for i in range(m2):
                k1[ids2[i]] = k2[i]
            if s < end2:
                delta2 *= 1.25
            elif m2 > 2 * inner:
                delta2 *= 0.9
            if s == start2:
                # No inner step proven: one step among all of T1, proven against theta1.
                b, best_err = _pick_at_step(w1, k1, m1, s, theta1, errs)
                if b < 0:
                    break
                level = _draw(
                    s, ids1[b], b, k1, h1, best_err, level, dataset_index, dataset_sample_index
                )
                s += 1
        for i in range(m1):
            counts[ids1[i]] = k1[i]
        if s < end1:
            delta1 *= 1.25
        elif m1 > 2 * outer:
            delta1 *= 0.9
        if s == start1:
            # No step proven at all: one exact full step guarantees progress.
            best, best_err = _pick_at_step(weights, counts, n, s, -np.inf, errs)
            dataset_index[s] = best
            dataset_sample_index[s] = np.int64(counts[best])
            counts[best] += 1.0
            level = best_err
            s += 1


@numba.njit(cache=True, nogil=True)
def _group_scan_kernel(
    weights, starts, members, size, dataset_index, dataset_sample_index
):  # pragma: no cover
    # The scan over groups of datasets with bit-equal weights (see the module docstring):
    # group g holds members[starts[g]:starts[g + 1]] in increasing order; picked[g] of them have
    # been drawn in the current round, each member having been drawn `rounds[g]` times before it.
    n = weights.shape[0]
    rounds = np.zeros(n, dtype=np.float64)
    picked = np.zeros(n, dtype=np.int64)
    rep = np.empty(n, dtype=np.int64)
    for g in range(n):
        rep[g] = members[starts[g]]
    for s in range(size):
        sd = max(float(s), 1.0)
        best = 0
        best_err = weights[0] * sd - rounds[0]
        for g in range(1, n):
            err = weights[g] * sd - rounds[g]
            if err > best_err or (err == best_err and rep[g] < rep[best]):
                best_err = err
                best = g
        dataset_index[s] = rep[best]
        dataset_sample_index[s] = np.int64(rounds[best])
        p = picked[best] + 1
        if p == starts[best + 1] - starts[best]:
            p = 0
            rounds[best] += 1.0
        picked[best] = p
        rep[best] = members[starts[best] + p]


@numba.njit(cache=True, nogil=True)
def _exhaustive_scan_kernel(
    sizes, weights, dataset_index, dataset_sample_index
):  # pragma: no cover
    n = sizes.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    alive = np.ones(n, dtype=np.bool_)
    for j in range(n):
        if sizes[j] == 0:
            alive[j] = False
    total = dataset_index.shape[0]
    for s in range(total):
        sd = max(float(s), 1.0)
        best = -1
        best_err = -np.inf
        for j in range(n):
            if alive[j]:
                err = weights[j] * sd - float(counts[j])
                if best < 0 or err > best_err:
                    best_err = err
                    best = j
        dataset_index[s] = best
        dataset_sample_index[s] = counts[best]
        counts[best] += 1
        if counts[best] == sizes[best]:
            alive[best] = False


@numba.njit(cache=True, nogil=True, inline="always")
def _recompute(node, t, weights, counts, win, exp, big, eps):  # pragma: no cover
    a = win[2 * node]
    b = win[2 * node + 1]
    if a < 0:
        win[node] = b
        exp[node] = big
        return
    if b < 0:
        win[node] = a
        exp[node] = big
        return
    te = max(t, 1)
    sd = float(te)
    ea = weights[a] * sd - float(counts[a])
    eb = weights[b] * sd - float(counts[b])
    if eb > ea:
        x = b
        y = a
    else:
        x = a
        y = b
    win[node] = x
    wx = weights[x]
    wy = weights[y]
    cx = float(counts[x])
    cy = float(counts[y])
    if wx == wy and cx == cy:
        exp[node] = big
        return
    margin = (wx - wy) * sd - (cx - cy) - eps * ((wx + wy) * sd + cx + cy + 1.0)
    if margin <= 0.0:
        exp[node] = t + 1
        return
    slope = (wx - wy) - eps * (wx + wy)
    if slope >= 0.0:
        exp[node] = big
        return
    steps = margin / (-slope) * (1.0 - 1e-9)
    if steps > 1e17:
        exp[node] = big
    elif steps < 1.0:
        exp[node] = t + 1
    else:
        exp[node] = te + np.int64(steps)


@numba.njit(cache=True, nogil=True)
def _refresh(t, leaves, weights, counts, win, exp, sub, stack, big, eps):  # pragma: no cover
    # Post-order walk of the nodes whose subtree holds an expired certificate.
    if sub[1] > t:
        return
    stack[0] = 1
    top = 1
    while top > 0:
        top -= 1
        item = stack[top]
        if item > 0:
            node = item
            if node >= leaves or sub[node] > t:
                continue
            stack[top] = -node
            top += 1
            stack[top] = 2 * node
            top += 1
            stack[top] = 2 * node + 1
            top += 1
        else:
            node = -item
            _recompute(node, t, weights, counts, win, exp, big, eps)
            m = exp[node]
            m = min(m, sub[2 * node])
            m = min(m, sub[2 * node + 1])
            sub[node] = m


@numba.njit(cache=True, nogil=True)
def _tree_kernel(
    weights, sizes, exhaustive, dataset_index, dataset_sample_index
):  # pragma: no cover
    n = weights.shape[0]
    leaves = 1
    while leaves < n:
        leaves *= 2
    leaves = max(leaves, 2)
    big = np.int64(1) << np.int64(62)
    eps = 2.0**-40
    win = np.full(2 * leaves, -1, dtype=np.int64)
    exp = np.full(2 * leaves, big, dtype=np.int64)
    sub = np.full(2 * leaves, big, dtype=np.int64)
    counts = np.zeros(n, dtype=np.int64)
    for j in range(n):
        if not exhaustive or sizes[j] > 0:
            win[leaves + j] = j
    for node in range(1, leaves):
        exp[node] = -1
        sub[node] = -1
    depth = 0
    k = leaves
    while k > 1:
        k //= 2
        depth += 1
    stack = np.empty(3 * (depth + 2) + 8, dtype=np.int64)
    total = dataset_index.shape[0]
    for t in range(total):
        _refresh(t, leaves, weights, counts, win, exp, sub, stack, big, eps)
        j = win[1]
        dataset_index[t] = j
        dataset_sample_index[t] = counts[j]
        counts[j] += 1
        if exhaustive and counts[j] == sizes[j]:
            win[leaves + j] = -1
        node = (leaves + j) // 2
        while node >= 1:
            exp[node] = t + 1
            sub[node] = t + 1
            node //= 2


def _check_weights(weights: np.ndarray) -> None:
    """What the greedy kernel needs of its float64 weights: finite, none negative, one > 0.

    This is not the blends' weight rule (`blend_spec.validate_weights`, which every `Blend` has
    passed before its normalized weights reach the kernel): like Megatron's C++ helper, the
    kernel itself draws nothing from a zero weight, so it accepts one.
    """
    if weights.ndim != 1 or weights.shape[0] == 0:
        raise ValueError(f"weights must be a non-empty 1-D array, got shape {weights.shape}")
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"weights = {weights[:8]}... contain NaN or infinity")
    if np.any(weights < 0):
        raise ValueError(f"weights contain a negative value: {weights[weights < 0][:4]}")
    if not np.any(weights > 0):
        raise ValueError("weights are all zero")


def _check_out(dataset_index: np.ndarray, dataset_sample_index: np.ndarray, size: int, n: int) -> None:
    for name, a in (("dataset_index", dataset_index), ("dataset_sample_index", dataset_sample_index)):
        if not isinstance(a, np.ndarray) or a.shape != (size,):
            raise ValueError(f"out {name} must be a 1-D array of {size} entries")
    if dataset_index.dtype.kind != "i" or np.iinfo(dataset_index.dtype).max < n - 1:
        raise ValueError(f"out dataset_index dtype {dataset_index.dtype} cannot hold {n} dataset ids")
    if dataset_sample_index.dtype != np.int64:
        raise ValueError(f"out dataset_sample_index dtype {dataset_sample_index.dtype}; expected int64")


def tie_groups(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Datasets grouped by bit-equal weight, groups ordered by their smallest dataset index.

    Returns:
      `(group_weights, starts, members)`: group g has weight `group_weights[g]` and the dataset
      ids `members[starts[g]:starts[g + 1]]`, increasing.
    """
    values, first, inverse = np.unique(weights, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(len(values))
    group = rank[inverse.reshape(-1)]
    members = np.argsort(group, kind="stable").astype(np.int64)
    starts = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=len(values)), out=starts[1:])
    return values[order], starts, members


def _groupable(weights: np.ndarray, size: int) -> bool:
    # Counts one apart must give distinct float64 errors (see the module docstring).
    return float(weights.max()) * max(size, 1) + size < 2.0**50


def build_blending_indices(
    weights: np.ndarray | list[float],
    size: int,
    *,
    method: str = "auto",
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sized weighted blend: Megatron's `build_blending_indices`, bit for bit.

    Args:
      weights: float64 weights as the blend uses them (Megatron passes normalized weights).
      size: number of blend positions.
      method: "auto" (scan below `BLOCK_THRESHOLD` datasets; groups of equal weights when
        there are fewer than `GROUP_THRESHOLD` distinct weights and some are equal; the tree
        for weights within `NEAR_EQUAL_SPREAD` of each other; else block), "scan"
        (O(size x n)), "group" (O(size x distinct weights)), "tree" (O(size log n)) or
        "block" (~O(size x n**(1/3))).
      out: arrays to write the result into (every position is written), e.g. slices of a
        larger blend: a signed integer array wide enough for the dataset ids and an int64
        array, both 1-D of `size` entries. None: new arrays.

    Returns:
      `(dataset_index, dataset_sample_index)`: int16 (int32 for >= 32767 datasets) and int64
      (or `out`).

    Raises:
      ValueError: bad weights, size or `out`.
    """
    # + 0.0 turns a -0.0 weight into +0.0 (same errors; bit-equal for grouping).
    w = np.ascontiguousarray(weights, dtype=np.float64) + 0.0
    _check_weights(w)
    require_int("size", size, 0)
    require_choice("method", method, ("auto", "scan", "group", "tree", "block"))
    if out is None:
        dataset_index = np.zeros(size, dtype=dataset_index_dtype(len(w)))
        dataset_sample_index = np.zeros(size, dtype=np.int64)
    else:
        dataset_index, dataset_sample_index = out
        _check_out(dataset_index, dataset_sample_index, size, len(w))
    if size == 0:
        return dataset_index, dataset_sample_index
    # Groups need more than 4 datasets (the register scan is as fast) and errors small enough.
    groupable = len(w) > 4 and _groupable(w, size)
    if method == "auto":
        if groupable and len(np.unique(w)) < min(len(w), GROUP_THRESHOLD):
            method = "group"
        elif len(w) < BLOCK_THRESHOLD:
            method = "scan"
        else:
            method = "tree" if w.max() - w.min() < NEAR_EQUAL_SPREAD * w.max() else "block"
    if method == "group" and not groupable:
        method = "scan"
    if method == "group":
        _group_scan_kernel(*tie_groups(w), np.int64(size), dataset_index, dataset_sample_index)
    elif method == "scan" and len(w) <= 4:
        padded = np.full(4, -1.0)
        padded[: len(w)] = w
        _scan4_kernel(padded, np.int64(size), dataset_index, dataset_sample_index)
    elif method == "scan":
        _scan_kernel(w, np.int64(size), dataset_index, dataset_sample_index)
    elif method == "tree":
        _tree_kernel(
            w, np.zeros(len(w), dtype=np.int64), False, dataset_index, dataset_sample_index
        )
    else:
        outer, inner = block_sizes(len(w))
        _block_kernel(
            w,
            np.int64(size),
            np.int64(outer),
            np.int64(inner),
            heavy_datasets(w, inner),
            dataset_index,
            dataset_sample_index,
        )
    return dataset_index, dataset_sample_index


def build_exhaustive_blending_indices(
    sizes: np.ndarray | list[int], *, method: str = "auto"
) -> tuple[np.ndarray, np.ndarray]:
    """Exhaustive blend: exactly `sizes[j]` samples of dataset j (Megatron's exhaustive variant).

    The weights are `sizes[j] / sum(sizes)` in float64; each step picks, among datasets not yet
    exhausted, the first with the strictly largest error.

    Args:
      sizes: per-dataset sample counts (>= 0, not all zero).
      method: "auto", "scan" or "tree".

    Returns:
      `(dataset_index, dataset_sample_index)` of length `sum(sizes)`.

    Raises:
      ValueError: negative or all-zero sizes.
    """
    s = np.ascontiguousarray(sizes, dtype=np.int64)
    if s.ndim != 1 or s.shape[0] == 0:
        raise ValueError(f"sizes must be a non-empty 1-D array, got shape {s.shape}")
    if np.any(s < 0):
        raise ValueError(f"sizes contain a negative value: {s[s < 0][:4]}")
    total = int(s.sum())
    if total == 0:
        raise ValueError("sizes are all zero")
    require_choice("method", method, ("auto", "scan", "tree"))
    w = s / np.float64(total)
    dataset_index = np.zeros(total, dtype=dataset_index_dtype(len(s)))
    dataset_sample_index = np.zeros(total, dtype=np.int64)
    if method == "auto":
        method = "tree" if len(s) >= TREE_THRESHOLD else "scan"
    if method == "scan":
        _exhaustive_scan_kernel(s, w, dataset_index, dataset_sample_index)
    else:
        _tree_kernel(w, s, True, dataset_index, dataset_sample_index)
    return dataset_index, dataset_sample_index
