"""The CPU default schedule's rule for a reduction over a weight-like input
``W[c, <reduction axes>...]`` (a convolution, a matrix product by a transposed weight):
a block of ``VECTOR`` output channels ``c`` is kept in vector registers; the weights are
repacked once per channel block so those channels are contiguous, a few positions of the
innermost output axis are unrolled beside them, the reduction axes run outside, and the
blocks of channels run in parallel. (A channel-blocked convolution of the blocked layout
has its own rule: cpu_schedule_blocked.py.) In a grouped convolution the vector holds
channels of one group only (``lanes``): lanes of two groups read two inputs, a gather per
multiply-add (shufflenet's groups of 68 channels ran at about 1 GFLOP/s)."""

from __future__ import annotations

from .cpu_schedule_queries import loop_extent

VECTOR = 8        # output channels in one vector register (8 floats: AVX2; 2 on SSE)
POSITIONS = 7     # output positions unrolled beside them (7 x 8 accumulators in registers)


def schedule(sch, block) -> bool:
    """The rule applied to the reduction ``block`` where it has a weight-like input;
    whether it had one."""
    loops = sch.get_loops(block)
    kinds = [int(iv.iter_type) for iv in sch.get(block).iter_vars]
    weight = _weight_read(sch, block, loops, kinds) if len(loops) == len(kinds) else None
    if weight is None or lanes(sch, block, weight[1]) < 2:
        return False
    spatial = [lp for lp, k in zip(loops, kinds) if k == 0]
    reduce = [lp for lp, k in zip(loops, kinds) if k == 2]
    _channel_vectors(sch, block, spatial, reduce, *weight, lanes(sch, block, weight[1]))
    return True


def lanes(sch, block, channel) -> int:
    """Channels in one vector: VECTOR, or where a read's index divides the channel ``c`` by
    a group's size ``k`` (``data[c // k * (I/groups) + rc]``: a grouped convolution) the
    greatest common divisor of the two, so the lanes of a vector are one group's."""
    import math

    import tvm

    b = sch.get(block)
    var = next(iv.var for iv, lp in zip(b.iter_vars, sch.get_loops(block))
               if sch.get(lp).same_as(sch.get(channel)))
    found = VECTOR

    def visit(expr):
        nonlocal found
        if isinstance(expr, (tvm.tirx.FloorDiv, tvm.tirx.FloorMod)) and expr.a.same_as(var) \
                and isinstance(expr.b, tvm.tirx.IntImm):
            found = math.gcd(found, int(expr.b.value))
        for field in ("a", "b"):
            child = getattr(expr, field, None)
            if isinstance(child, tvm.ir.Expr):
                visit(child)

    for region in b.reads:
        for r in region.region:
            visit(r.min)
    return found


def _largest_divisor(extent: int, cap: int) -> int:
    return next(d for d in range(min(extent, cap), 0, -1) if extent % d == 0)


def _weight_read(sch, block, loops, kinds):
    """(index of the weight-like read, the loop of its channel axis, the channel's position
    in the read's indices) or None: a read indexed by one output axis alone (the channel,
    a multiple of VECTOR long) and otherwise by reduction axes only (``W[c, rc, ry, rx]``,
    ``W[k, c]``)."""
    import tvm

    b = sch.get(block)
    iter_vars = list(b.iter_vars)
    spatial = {iv.var: i for i, iv in enumerate(iter_vars) if int(iv.iter_type) == 0}
    reduce_vars = [iv.var for iv in iter_vars if int(iv.iter_type) == 2]
    output = b.writes[0].source
    for index, region in enumerate(b.reads):
        if region.source.same_as(output) or len(region.region) < 2:
            continue
        found = []
        for at, r in enumerate(region.region):
            position = next((i for var, i in spatial.items() if r.min.same_as(var)), None)
            if position is not None and int(r.extent) == 1:
                found.append((at, position))
        if len(found) != 1:
            continue
        at, position = found[0]
        rest = [r.min for i, r in enumerate(region.region) if i != at]
        used = [v for r in rest for v in tvm.tirx.analysis.undefined_vars(r)]
        if used and all(any(v.same_as(rv) for rv in reduce_vars) for v in used) \
                and loop_extent(sch, loops[position]) % VECTOR == 0:
            return index, loops[position], at
    return None


def _channel_vectors(sch, block, spatial, reduce, weight_index, channel, at, vector) -> None:
    import tvm

    channel_at = next(i for i, lp in enumerate(spatial) if lp.same_as(channel))
    others = [lp for lp in spatial if not lp.same_as(channel)]
    inner = others[-1] if others else None
    channel_o, channel_i = sch.split(channel, [None, vector])
    before = [lp for lp in spatial[:channel_at] if inner is None or not lp.same_as(inner)]
    after = [lp for lp in spatial[channel_at + 1:] if inner is None or not lp.same_as(inner)]
    if inner is not None:
        inner_o, inner_i = sch.split(
            inner, [None, _largest_divisor(loop_extent(sch, inner), POSITIONS)])
        sch.reorder(*before, channel_o, *after, inner_o, *reduce, inner_i, channel_i)
        anchor = inner_o
    else:
        sch.reorder(*before, channel_o, *reduce, channel_i)
        anchor, inner_i = channel_o, None
    ndim = len(sch.get(block).reads[weight_index].region)
    if at != ndim - 1:  # channels not contiguous: repack each block of them, once
        weights = sch.cache_read(block, weight_index, "global")
        sch.compute_at(weights, channel_o)
        sch.transform_layout(block, ("read", weight_index), tvm.tirx.IndexMap.from_func(
            lambda *axes: (*axes[:at], axes[at] // vector, *axes[at + 1:], axes[at] % vector),
            ndim=ndim))
    cache = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(cache, anchor)
    outer = [*before, channel_o]
    sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    if inner_i is not None:
        sch.unroll(inner_i)
    sch.vectorize(channel_i)
    sch.decompose_reduction(block, reduce[0])
