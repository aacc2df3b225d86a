"""The CPU default schedule's rules for the blocks no other rule takes:

- reductions (pooling, means) run their outer output axes in parallel; in the blocked
  layout their channel block is one vector under the window's loops, and a padding
  before them is inlined (its bounds check is then one per vector): resnet50's max
  pooling 0.09 -> 0.02 ms; a reduction along each row's contiguous last axis (softmax,
  a mean over the features) runs in vectors of partial results (``_row_vectors``);
- element-wise blocks: every loop fused, split into parallel chunks of vectors."""

from __future__ import annotations

from .cpu_schedule_queries import loop_extent, pads

ELEMENTWISE = 16  # floats per vector in element-wise loops (LLVM splits wider vectors)


def reduction(sch, block) -> None:
    """A reduction with no weight-like input (cpu_schedule_conv.py): pooling, a mean."""
    loops = sch.get_loops(block)
    kinds = [int(iv.iter_type) for iv in sch.get(block).iter_vars]
    if _row_vectors(sch, block, loops, kinds):
        return
    spatial = [lp for lp, k in zip(loops, kinds) if k == 0]
    reduce = [lp for lp, k in zip(loops, kinds) if k == 2]
    lanes = _contiguous_lanes(sch, block, loops, kinds)
    outer = [lp for lp in spatial
             if loop_extent(sch, lp) > 1 and not (lanes is not None and lp.same_as(lanes))][:2] \
        or spatial[:1]
    if lanes is not None:  # the blocked layout's channels: innermost, one vector
        sch.reorder(*reduce, lanes)
        for producer in sch.get_producers(block):
            if pads(sch, producer):  # its bounds check is one per vector here, not per float
                try:
                    sch.compute_inline(producer)
                except Exception:  # noqa: BLE001 - another consumer reads it: left apart
                    pass
    if outer:
        fused = sch.fuse(*outer) if len(outer) > 1 and _adjacent(sch, outer) else outer[0]
        sch.parallel(fused)
    if lanes is not None:
        sch.vectorize(lanes)
        sch.decompose_reduction(block, reduce[0])


def _row_vectors(sch, block, loops, kinds) -> bool:
    """A reduction along each row's contiguous last axis (softmax's max and sum of exp, a
    mean or a layer norm over the features) as ``ELEMENTWISE``-float partial results: the
    row's vectors reduced lane by lane, then the lanes (TVM's ``rfactor``), the rows in
    parallel. Where the loop nest was one scalar chain per row: attention's softmax over
    [12, 128, 128] took 1.2 ms, 8% of a BERT-style encoder. False (nothing changed) for
    any other reduction, a row not a whole number of vectors, or a reduction TVM cannot
    split (several outputs at once)."""
    b = sch.get(block)
    if len(loops) != len(kinds) or kinds[-1] != 2 or kinds.count(2) != 1 or len(loops) < 2:
        return False
    k = b.iter_vars[-1].var
    extent = loop_extent(sch, loops[-1])
    if extent % ELEMENTWISE or extent < 2 * ELEMENTWISE or len(b.writes) != 1:
        return False
    if not all(_last_is(r, k) or not _uses(r, k) for r in b.reads) or not any(
            _last_is(r, k) for r in b.reads):
        return False
    k_o, k_i = sch.split(loops[-1], [None, ELEMENTWISE])
    try:
        partial = sch.rfactor(k_i, len(loops) - 1)
    except Exception:  # noqa: BLE001 - a reducer rfactor refuses: fuse k back (one loop)
        sch.fuse(k_o, k_i)
        return False
    rows = sch.get_loops(block)[:-1]
    fused = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    sch.parallel(fused)
    sch.compute_at(partial, fused)
    *_, lane, step = sch.get_loops(partial)  # compute_at's loops: the lanes, then the steps
    sch.reorder(step, lane)
    sch.vectorize(lane)
    sch.decompose_reduction(partial, step)
    return True


def _last_is(region, var) -> bool:
    """Whether the buffer region is indexed by ``var`` alone, one element, on its last axis."""
    last = region.region[-1] if region.region else None
    return last is not None and last.min.same_as(var) and int(last.extent) == 1


def _uses(region, var) -> bool:
    """Whether any index of the buffer region reads ``var``."""
    from tvm.tirx.analysis import undefined_vars

    return any(v.same_as(var) for r in region.region for v in undefined_vars(r.min))


def _contiguous_lanes(sch, block, loops, kinds):
    """The loop of the last spatial axis when reductions run inside it, it indexes the last
    axis of every buffer the block reads and writes, alone, and it is a vector's length
    (the channel block of a pooling in the blocked layout: 16 floats with AVX-512): then it
    can be a vector loop under the reductions. None otherwise (NCHW pooling, whose last
    axis is a strided window)."""
    if len(loops) != len(kinds) or kinds[-1] != 2 or 0 not in kinds:
        return None
    at = max(i for i, k in enumerate(kinds) if k == 0)
    b = sch.get(block)
    last = b.iter_vars[at].var
    if loop_extent(sch, loops[at]) not in (4, 8, 16):
        return None
    if not all(r.region and r.region[-1].min.same_as(last) and int(r.region[-1].extent) == 1
               for r in [*b.reads, *b.writes]):
        return None
    return loops[at]


def _adjacent(sch, loops) -> bool:
    """Whether the loops are directly nested, one inside the other, in order."""
    return all(sch.get(inner).same_as(sch.get(outer).body) for outer, inner in zip(loops, loops[1:]))


def elementwise(sch, block) -> None:
    """The innermost axis in vectors (a power of two dividing it), everything outside it fused
    and in parallel. (Fusing the innermost axis too would put a division by its extent in
    every vector lane.)"""
    loops = sch.get_loops(block)
    if not loops:
        return
    inner = loops[-1]
    extent = loop_extent(sch, inner)
    vector = next((v for v in (ELEMENTWISE, 8, 4) if extent % v == 0), 0)
    outer = list(loops[:-1])
    if vector and extent >= vector:
        outer_part, lanes = sch.split(inner, [None, vector])
        outer.append(outer_part)
        sch.vectorize(lanes)
    if outer:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
