"""The eigenvalues of a symmetric matrix after a rank-one change, from its eigendecomposition: the
roots of the secular equation (Golub 1973; Bunch, Nielsen & Sorensen 1978), O(n^2) work against a
new eigendecomposition's O(n^3).

`nb probe-bias` needs the spectra of two pairs of matrices that differ by rank one and has the
eigenvectors of one of each pair anyway (the partition function's directions): W^T W and the uniform
scatter sum_i (w_i - m)(w_i - m)^T = W^T W - n m m^T; the whitened rows' Gram matrix and their uniform
scatter (`nbcli.analysis.geometry.solve_whitening`). At d = 4,096 an eigenvalue-only decomposition
is ~12 s of one core on the benchmark machine; this is ~1.5 s.

If A = Q diag(d) Q^T, the eigenvalues of A + rho u u^T are those of diag(d) + rho z z^T, z = Q^T u,
and each is a root lambda of f(lambda) = 1 + rho sum_j z_j^2 / (d_j - lambda), one in each interval
between consecutive d_j (rho > 0: (d_k, d_k+1), the last in (d_n, d_n + rho |z|^2]). Each root is
found by rational interpolation of f's two pole terms (LAPACK dlaed4's idea), safeguarded by
bisection on f's sign, to an absolute error of a few eps (|d|_max + |rho| |z|^2), the backward error
of a symmetric eigensolver. Components with z_j too small to move d_j by that much keep d_j
(LAPACK's deflation rule, dlaed2). That error is relative to the decomposed matrix's scale, so the
roots stand in for the changed matrix's own decomposition only where its scale is within
MAX_SCALE_RATIO of that one (`keeps_digits`). Written once for numpy and torch (the array API standard).
"""

from __future__ import annotations

from typing import Any

from array_api_compat import device as device_of

from nbcli.array_ops import namespace_of

Array = Any

#: Roots solved together: their [chunk, n] work arrays stay in cache-sized pieces (~16 MB at n = 4,096).
CHUNK = 512
#: float64's machine epsilon.
_EPS = float(2.0 ** -52)
#: The roots' absolute error is a few eps times the decomposed matrix's scale (its trace, positive
#: semi-definite): they stand in for a decomposition of the changed matrix while that scale is at most
#: this many times the changed matrix's, so at most four of float64's ~16 digits go to the change (a
#: mean 1e5 times the rows' spread, whose W^T W is 1e11 times their scatter, lost 8e-5 relative).
MAX_SCALE_RATIO = 1e4
#: Rational steps and bisections per root at most: bisection alone needs ~55 (53 bits from the interval).
MAX_STEPS = 100


def rank_one_eigenvalues(values: Array, vectors: Array, u: Array, rho: float) -> Array:
    """Eigenvalues (ascending, float64) of Q diag(values) Q^T + rho u u^T, given the eigenvalues
    (ascending) and orthonormal eigenvectors Q of a symmetric matrix."""
    xp = namespace_of(values, vectors, u)
    z = xp.astype(u, xp.float64, copy=False) @ xp.astype(vectors, xp.float64, copy=False)  # Q^T u
    return secular_roots(xp.astype(values, xp.float64, copy=False), z, float(rho))


def keeps_digits(values: Array, u: Array, rho: float) -> bool:
    """Whether `rank_one_eigenvalues` is accurate for a positive semi-definite A = Q diag(values) Q^T
    changed by rho u u^T: trace(A) <= MAX_SCALE_RATIO trace(A + rho u u^T) (the change's trace,
    sum(values) + rho |u|^2, cancels where the ratio is large, which is also where this says no)."""
    xp = namespace_of(values, u)
    before = float(xp.sum(xp.abs(values)))
    after = float(xp.sum(values)) + rho * float(xp.sum(xp.astype(u, xp.float64, copy=False) ** 2))
    return after > 0 and before <= MAX_SCALE_RATIO * after


def secular_roots(d: Array, z: Array, rho: float) -> Array:
    """Eigenvalues (ascending) of diag(d) + rho z z^T for ascending d (see the module docstring)."""
    xp = namespace_of(d, z)
    if rho == 0.0 or d.shape[0] == 0:
        return xp.asarray(d, copy=True)
    if rho < 0:  # diag(d) - |rho| z z^T = -(diag(-d) + |rho| z z^T): the mirrored problem, reversed
        return -xp.flip(secular_roots(-xp.flip(d), xp.flip(z), -rho))
    weights = rho * z * z  # rho z_j^2 >= 0
    total = float(xp.sum(weights))
    scale = max(float(xp.max(xp.abs(d))), total)
    tolerance = 8 * _EPS * scale
    # deflation (dlaed2): rho |z| |z_j| <= tol moves d_j by at most tol, so d_j is an eigenvalue
    kept = xp.sqrt(weights * total) > tolerance
    if not bool(xp.any(kept)):
        return xp.asarray(d, copy=True)
    poles, kept_weights = d[kept], weights[kept]
    roots = [_roots_between(poles, kept_weights, total, tolerance, start, min(start + CHUNK, poles.shape[0]))
             for start in range(0, poles.shape[0], CHUNK)]
    return xp.sort(xp.concat([d[~kept], *roots]))


def _roots_between(d: Array, w: Array, total: float, tolerance: float, start: int, stop: int) -> Array:
    """The roots in the intervals start..stop-1 of f = 1 + sum_j w_j / (d_j - lambda) (w_j > 0, d
    ascending): root k in (d_k, d_k+1), the last in (d_n, d_n + sum w]; lambda = d_k + t, t solved
    against differences d_j - d_k so that nothing cancels near the pole d_k."""
    xp = namespace_of(d, w)
    n = d.shape[0]
    where = device_of(d)  # new arrays on d's device (CUDA's, on that path)
    k = xp.arange(start, stop, device=where)
    origin = d[start:stop]
    following = d[start + 1:min(stop + 1, n)]
    upper = following - origin[:following.shape[0]]  # the interval's width: d_k+1 - d_k
    if stop == n:
        upper = xp.concat([upper, xp.asarray([total], dtype=d.dtype, device=where)])  # the last: d_n + sum w bounds it
    last = k == n - 1  # the last root has no pole above it
    offsets = d[None, :] - origin[:, None]  # d_j - d_k, [roots, n]
    below = xp.arange(n, device=where)[None, :] <= k[:, None]  # j <= k: the pole terms left of the root
    lo, hi = xp.zeros_like(upper), xp.asarray(upper, copy=True)
    t = hi / 2
    done = hi <= tolerance  # an interval narrower than the tolerance: any point of it
    for _ in range(MAX_STEPS):
        active = ~done
        if not bool(xp.any(active)):
            break
        ta, gap, is_last = t[active], upper[active], last[active]
        r = 1.0 / (offsets[active] - ta[:, None])  # 1 / (d_j - lambda)
        left = xp.where(below[active], r, 0.0)
        psi, dpsi = left @ w, (left * left) @ w  # sum_j<=k w_j / (d_j - lambda) and its derivative
        phi, dphi = r @ w - psi, (r * r) @ w - dpsi  # the same over j > k
        f = 1.0 + psi + phi
        # the sign of f moves the bracket (f increases across the interval)
        la, ha = xp.where(f < 0, ta, lo[active]), xp.where(f > 0, ta, hi[active])
        # f ~ c - b1 / t + b2 / (gap - t), matching psi and phi in value and slope at t
        b1 = dpsi * ta * ta
        b2 = xp.where(is_last, 0.0, dphi * (gap - ta) ** 2)
        c = 1.0 + psi + dpsi * ta + xp.where(is_last, 0.0, phi - dphi * (gap - ta))
        # its root in (0, gap): c t^2 - B t + b1 gap = 0, B = c gap + b1 + b2, with the discriminant
        # B^2 - 4 c b1 gap written as (c gap + b2 - b1)^2 + 4 b1 b2 and the root's form chosen by B's
        # sign, so that nothing cancels (the last root, b2 = 0, is b1 / c)
        big_b = c * gap + b1 + b2
        disc = xp.sqrt((c * gap + b2 - b1) ** 2 + 4.0 * b1 * b2)
        step = xp.where(big_b > 0, 2.0 * b1 * gap / (big_b + disc), (big_b - disc) / (2.0 * c))
        inside = (step > la) & (step < ha) & xp.isfinite(step)
        new = xp.where(f == 0, ta, xp.where(inside, step, (la + ha) / 2))
        width = 2 * _EPS * (xp.abs(origin[active]) + new) + _EPS * total
        finished = (xp.abs(new - ta) <= width) | (ha - la <= width) | (f == 0)
        lo[active], hi[active], t[active] = la, ha, new
        done[active] = finished
    return origin + t
