"""The CPU default schedule's rule for matrix products (``out[..., i, j] = sum_k a[..., i, k]
* b[..., k, j]``): TVM's ``matmul`` (attention's batched products, a product by a weight in
NCHW) and the blocked layout's ``matmul_packed`` (a constant weight in panels of the vector
width: steps/packed_matmul.py). As MLAS's SGEMM kernels do:

- a register tile of ``rows x panels`` accumulators, each a vector of the output's columns
  (16 floats with AVX-512, 8 with AVX2), kept in registers over the whole reduction: about
  three quarters of the register file (24 of AVX-512's 32, 12 of AVX2's 16), the rest for
  the weight vectors and the broadcast input (``tile``);
- the reduction inside the tile loops, the innermost: per step one input element is
  broadcast per row, one weight vector loaded per panel (a packed panel is one contiguous
  stream), rows x panels fused multiply-adds;
- the batch axes, the tiles of panels, then of rows, fused and in parallel (a thread keeps
  its panels in cache while it sweeps the rows);
- the epilogue (bias, GELU's erf, residual add, scaling: one block once the element-wise
  blocks are inlined into each other) computed from the registers as they are written out.

A batch-1 product (a matrix-vector product: one row) streams each panel once, several panels
at a time for independent accumulators, the panels in parallel.
"""

from __future__ import annotations

import math

from .cpu_schedule_queries import loop_extent

NAMES = ("matmul", "matmul_packed")  # the blocks TVM's and the packed legalization make


def is_matmul(sch, block) -> bool:
    """A product block as the legalizations make it: spatial iterators, then one reduction;
    the output's last index is the last spatial iterator (the columns, the vector axis)."""
    b = sch.get(block)
    kinds = [int(iv.iter_type) for iv in b.iter_vars]
    if b.name_hint not in NAMES or len(kinds) < 3 or kinds != [0] * (len(kinds) - 1) + [2]:
        return False
    if len(sch.get_loops(block)) != len(kinds) or len(b.writes) != 1:
        return False
    last = b.writes[0].region[-1].min
    return last.same_as(b.iter_vars[-2].var)


def tile(rows: int, panels: int, registers: int) -> tuple[int, int]:
    """(rows, panels) of the register tile, dividing ``rows`` and ``panels`` (the product's
    row count and column vectors) so no loop has a tail: the most accumulators up to three
    quarters of ``registers``, at most 4 panels (8 for a single row: a matrix-vector
    product has no rows to share a weight vector with, only panels to stream side by side);
    among equals, more panels (each broadcast serves more vectors)."""
    accumulators = registers * 3 // 4
    cap = 8 if rows == 1 else 4
    tiles = [(_largest_divisor(rows, accumulators // p), p)
             for p in range(1, min(cap, panels) + 1) if panels % p == 0]
    return max(tiles, key=lambda t: (t[0] * t[1], t[1]))


def _largest_divisor(extent: int, cap: int) -> int:
    return next(d for d in range(min(extent, max(1, cap)), 0, -1) if extent % d == 0)


def schedule(sch, block, registers: int, shape: tuple[int, int] | None = None) -> list[str] | None:
    """Schedule the product ``block`` and its epilogue; the names of the blocks it scheduled,
    or None where the columns do not split into vectors of 4 or more floats (the other rules
    take it). ``shape``: (rows, panels) of the tile instead of ``tile``'s (to measure)."""
    *batch, i, j, k = sch.get_loops(block)
    vector = 16 if registers >= 32 else 8
    columns = loop_extent(sch, j)
    lanes = math.gcd(columns, vector)
    if lanes < 4:
        return None
    rows, panels = shape or tile(loop_extent(sch, i), columns // lanes, registers)
    j_o, j_p, lane = sch.split(j, [None, panels, lanes])
    i_o, i_i = sch.split(i, [None, rows])
    sch.reorder(*batch, j_o, i_o, k, i_i, j_p, lane)
    consumers = sch.get_consumers(block)
    writer = sch.cache_write(block, 0, "local")
    if len(consumers) == 1:  # the epilogue, computed as the registers are written out
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - not inlinable: computed after the tile instead
            pass
    sch.reverse_compute_at(writer, i_o)
    sch.parallel(sch.fuse(*batch, j_o, i_o))
    sch.unroll(i_i)
    sch.unroll(j_p)
    sch.vectorize(lane)
    *_, inner = sch.get_loops(writer)
    sch.vectorize(inner)
    init = sch.decompose_reduction(block, k)
    return [sch.get(b).name_hint for b in (block, writer, init)]
