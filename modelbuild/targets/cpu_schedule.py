"""The CPU targets' default schedule: what a workload without a record gets (TVM's own
default is a serial, scalar loop nest: resnet50 ran about 70x slower than onnxruntime).

Rules by the shape of each block, in the spirit of DLight's GPU rules:

- a copy of a tensor into an equal-shaped buffer is inlined into its consumer,
  as are element-wise epilogues (a bias add, a ReLU) into the reduction before
  them; a padding copy stays apart (inlined, its bounds checks would sit in the
  innermost loop) and runs in parallel;
- a reduction over a weight-like input ``W[c, <reduction axes>...]`` (a
  convolution, a matrix product by a transposed weight) keeps a block of
  ``VECTOR`` output channels ``c`` in vector registers: the weights are repacked
  once per channel block so those channels are contiguous, a few positions of
  the innermost output axis are unrolled beside them, the reduction axes run
  outside, and the blocks of channels run in parallel;
- other reductions (pooling, means) run their outer output axes in parallel; in the
  blocked layout their channel block is one vector under the window's loops, and a
  padding before them is inlined (its bounds check is then one per vector): resnet50's
  max pooling 0.09 -> 0.02 ms;
- element-wise blocks: every loop fused, split into parallel chunks of vectors;
- a channel-blocked convolution (the blocked layout's ``conv2d_NCHWc``) and its
  epilogue: cpu_schedule_blocked.py.

A rule that does not apply leaves the block to TVM's default, and a workload with an
opaque block (sorting, non-max-suppression) is left to it whole: the schedule never
fails a build. It is deterministic (the same workload gives the same schedule)
and its code is part of lower's key.
"""

from __future__ import annotations

VECTOR = 8        # output channels in one vector register (8 floats: AVX2; 2 on SSE)
POSITIONS = 7     # output positions unrolled beside them (7 x 8 accumulators in registers)
ELEMENTWISE = 16  # floats per vector in element-wise loops (LLVM splits wider vectors)


def default_schedule(func, name: str, target):
    """``func`` with the rules above applied (a copy; ``func`` is unchanged)."""
    from tvm.s_tir import Schedule

    from ..core.workloads import normalize

    sch = Schedule(normalize(func))
    try:
        _apply(sch, _registers(target))
    except Exception:  # noqa: BLE001 - a rule that cannot apply: TVM's default schedule
        return func
    scheduled = _as_scheduled(sch.mod["main"], func)
    return scheduled if _well_formed(scheduled) else func


def _well_formed(func) -> bool:
    """Whether TVM can compile ``func``: a schedule primitive can accept a step and leave
    TIR that no code generator takes (inlining a split's add into a resize that the split's
    other half still reads: "Buffer resize_intermediate is used before its definition",
    found by a differential run). Such a workload gets TVM's default schedule."""
    import tvm
    from tvm.s_tir.analysis import verify_well_formed

    try:
        return bool(verify_well_formed(tvm.IRModule({"main": func}), assert_mode=False))
    except Exception:  # noqa: BLE001 - whatever stops the check stops the code generator
        return False


def _as_scheduled(scheduled, original):
    import tvm

    from ..core.workloads import copy

    return tvm.tirx.PrimFunc(scheduled.params, scheduled.body, scheduled.ret_type,
                             attrs=copy(original).attrs).with_attr("tirx.is_scheduled", True)


def _registers(target) -> int:
    """Vector registers of the target's CPU: 32 with AVX-512, else 16 (AVX2, SSE). Read the
    way the blocked layout's block is (cpu.vector_floats: 16 floats means AVX-512), so the
    two never disagree; the ``c`` target, which has no ``mcpu``, is this machine's CPU
    there, as its C compiler builds for it."""
    from .cpu import vector_floats

    try:
        return 32 if vector_floats(dict(target.export())) == 16 else 16
    except Exception:  # noqa: BLE001 - no CPU features to read: the smaller register file
        return 16


def _apply(sch, registers: int = 16) -> None:
    from . import cpu_schedule_blocked as blocked

    root = sch.get_sblock("root", func_name="main")
    if any(_opaque(sch, b) for b in sch.get_child_blocks(root)):
        raise ValueError("an opaque block (an extern-style kernel: sorting, NMS): TVM's default")
    _inline(sch, root)
    done: set[str] = set()
    for name in [sch.get(b).name_hint for b in sch.get_child_blocks(root)]:
        if name in done or name not in _block_names(sch, root):
            continue  # an epilogue a blocked rule took in
        block = sch.get_sblock(name, func_name="main")
        if _is_reduction(sch, block) and blocked.is_blocked_conv(sch, block):
            done.update(blocked.schedule(sch, block, registers))
    for block in sch.get_child_blocks(root):
        if sch.get(block).name_hint in done:
            continue
        if _is_reduction(sch, block):
            _reduction(sch, block)
        else:
            _elementwise(sch, block)


def _opaque(sch, block) -> bool:
    """A block without iterators whose body is more than one store (its own loops, while
    loops, in-place updates of other blocks' buffers): the rules would break it (inlining
    a buffer it writes gave "Buffer T_gather is used before its definition" on NMS)."""
    import tvm

    b = sch.get(block)
    return not b.iter_vars and not isinstance(b.body, tvm.tirx.BufferStore)


def _block_names(sch, root) -> set[str]:
    return {sch.get(b).name_hint for b in sch.get_child_blocks(root)}


def _is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def _inline(sch, root) -> None:
    """Inline copies and epilogues (not padding: see the module's docstring), until none is
    left or inlining one more would make an expression too big to compile (``_grows``)."""
    changed = True
    while changed:
        changed = False
        for block in sch.get_child_blocks(root):
            if _is_reduction(sch, block) or _pads(sch, block):
                continue
            for inline, forward in ((sch.compute_inline, True),
                                    (sch.reverse_compute_inline, False)):
                if _grows(sch, block, forward):
                    continue
                try:
                    inline(block)
                except Exception:  # noqa: BLE001 - not inlinable: scheduled on its own
                    continue
                changed = True
                break
            if changed:
                break


# An inlined block's expression is copied into its consumer once per use, and TIR is
# compiled as a tree: a chain of operators using their operand more than once (a Select,
# tanh, which LLVM's intrinsic rules lower to five uses of its argument) grows exponentially
# when inlined whole: 16 alternating Tanh and Abs took 100 s to compile (tvm.compile, which
# does not inline them, 0.1 s). Past this many nodes a block keeps its own buffer.
INLINED_NODES_MAX = 2048
_LOWERED_USES = {"tirx.tanh": 5, "tirx.tan": 2, "tirx.atanh": 2}
# TVM's simplifier takes time exponential in the nesting of Selects whose condition reads
# data: a chain of four Casts (float32 -> int32 -> float16 -> int8 -> float32, each a
# saturating Select on isnan/isinf of its operand), inlined whole (943 nodes), took 165 s to
# compile; with at most 2 such Selects nested in one expression, 0.06 s. Selects on indices
# alone (Winograd's constant matrices) do not count: no declared model's schedule changes.
DATA_SELECTS_MAX = 2


def _grows(sch, block, forward: bool) -> bool:
    """Whether inlining ``block`` into its consumers (``forward``: compute_inline) or its
    producer (reverse_compute_inline) would make an expression of more than
    INLINED_NODES_MAX nodes. A block this cannot measure (not one store) is left to the
    inline's own checks."""
    import tvm

    b = sch.get(block)
    try:
        others = [sch.get(o) for o in (sch.get_consumers if forward else sch.get_producers)(block)]
    except Exception:  # noqa: BLE001 - no such neighbours: the inline fails on its own
        return False
    for o in others:
        inner, outer = (b, o) if forward else (o, b)
        if not (isinstance(inner.body, tvm.tirx.BufferStore)
                and isinstance(outer.body, tvm.tirx.BufferStore) and inner.writes):
            continue
        try:
            size, _ = _tree(inner.body.value, None, {})
            outer_size, uses = _tree(outer.body.value, inner.writes[0].source, {})
        except Exception:  # noqa: BLE001 - an expression this does not know: inline as before
            continue
        if outer_size + uses * max(size - 1, 0) > INLINED_NODES_MAX:
            return True
        if uses and _data_selects(inner.body.value, {}) + _data_selects(outer.body.value, {}) \
                > DATA_SELECTS_MAX:
            return True
    return False


def _children(expr) -> list:
    import tvm

    if isinstance(expr, tvm.ir.Call):
        return list(expr.args)
    return [getattr(expr, f) for f in ("a", "b", "value", "condition", "true_value",
                                       "false_value", "body") if hasattr(expr, f)]


def _data_selects(expr, memo: dict) -> int:
    """How deep Selects whose condition reads a buffer nest in ``expr``."""
    import tvm

    key = expr.id_
    if key not in memo:
        inner = [_data_selects(c, memo) for c in _children(expr) if isinstance(c, tvm.ir.Expr)]
        here = isinstance(expr, tvm.tirx.Select) and _reads(expr.condition, {})
        memo[key] = max(inner, default=0) + here
    return memo[key]


def _reads(expr, memo: dict) -> bool:
    """Whether ``expr`` loads from a buffer."""
    import tvm

    key = expr.id_
    if key not in memo:
        memo[key] = isinstance(expr, tvm.ir.TensorLoad) or any(
            _reads(c, memo) for c in _children(expr) if isinstance(c, tvm.ir.Expr))
    return memo[key]


def _tree(expr, buffer, memo: dict) -> tuple[int, int]:
    """(nodes of ``expr`` as a tree once lowered, reads of ``buffer`` in it), each operand
    counted once per use."""
    import tvm

    key = expr.id_
    if key in memo:
        return memo[key]
    if isinstance(expr, tvm.ir.TensorLoad):
        found = (1, 1 if buffer is not None and expr.source.same_as(buffer) else 0)
    else:
        weight = 1
        if isinstance(expr, tvm.ir.Call):
            weight = _LOWERED_USES.get(getattr(expr.op, "name", ""), 1)
        size, uses = 1, 0
        for child in _children(expr):
            if isinstance(child, tvm.ir.Expr):
                s, u = _tree(child, buffer, memo)
                size, uses = size + weight * s, uses + weight * u
        found = (size, uses)
    memo[key] = found
    return found


def _pads(sch, block) -> bool:
    """A block writing a bigger buffer than it reads: a padding."""
    b = sch.get(block)
    if len(b.reads) != 1 or len(b.writes) != 1:
        return False
    src, dst = b.reads[0].source, b.writes[0].source
    return [int(d) for d in src.shape] != [int(d) for d in dst.shape] and len(src.shape) == len(dst.shape)


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
                and _extent(sch, loops[position]) % VECTOR == 0:
            return index, loops[position], at
    return None


def _reduction(sch, block) -> None:
    loops = sch.get_loops(block)
    kinds = [int(iv.iter_type) for iv in sch.get(block).iter_vars]
    spatial = [lp for lp, k in zip(loops, kinds) if k == 0]
    reduce = [lp for lp, k in zip(loops, kinds) if k == 2]
    weight = _weight_read(sch, block, loops, kinds) if len(loops) == len(kinds) else None
    if weight is not None:
        _channel_vectors(sch, block, spatial, reduce, *weight)
        return
    lanes = _contiguous_lanes(sch, block, loops, kinds)
    outer = [lp for lp in spatial
             if _extent(sch, lp) > 1 and not (lanes is not None and lp.same_as(lanes))][:2] \
        or spatial[:1]
    if lanes is not None:  # the blocked layout's channels: innermost, one vector
        sch.reorder(*reduce, lanes)
        for producer in sch.get_producers(block):
            if _pads(sch, producer):  # its bounds check is one per vector here, not per float
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
    if _extent(sch, loops[at]) not in (4, 8, 16):
        return None
    if not all(r.region and r.region[-1].min.same_as(last) and int(r.region[-1].extent) == 1
               for r in [*b.reads, *b.writes]):
        return None
    return loops[at]


def _adjacent(sch, loops) -> bool:
    """Whether the loops are directly nested, one inside the other, in order."""
    return all(sch.get(inner).same_as(sch.get(outer).body) for outer, inner in zip(loops, loops[1:]))


def _channel_vectors(sch, block, spatial, reduce, weight_index, channel, at) -> None:
    import tvm

    channel_at = next(i for i, lp in enumerate(spatial) if lp.same_as(channel))
    others = [lp for lp in spatial if not lp.same_as(channel)]
    inner = others[-1] if others else None
    channel_o, channel_i = sch.split(channel, [None, VECTOR])
    before = [lp for lp in spatial[:channel_at] if inner is None or not lp.same_as(inner)]
    after = [lp for lp in spatial[channel_at + 1:] if inner is None or not lp.same_as(inner)]
    if inner is not None:
        inner_o, inner_i = sch.split(inner, [None, _largest_divisor(_extent(sch, inner), POSITIONS)])
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
            lambda *axes: (*axes[:at], axes[at] // VECTOR, *axes[at + 1:], axes[at] % VECTOR),
            ndim=ndim))
    cache = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(cache, anchor)
    outer = [*before, channel_o]
    sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    if inner_i is not None:
        sch.unroll(inner_i)
    sch.vectorize(channel_i)
    sch.decompose_reduction(block, reduce[0])


def _elementwise(sch, block) -> None:
    """The innermost axis in vectors (a power of two dividing it), everything outside it fused
    and in parallel. (Fusing the innermost axis too would put a division by its extent in
    every vector lane.)"""
    loops = sch.get_loops(block)
    if not loops:
        return
    inner = loops[-1]
    extent = _extent(sch, inner)
    vector = next((v for v in (ELEMENTWISE, 8, 4) if extent % v == 0), 0)
    outer = list(loops[:-1])
    if vector and extent >= vector:
        outer_part, lanes = sch.split(inner, [None, vector])
        outer.append(outer_part)
        sch.vectorize(lanes)
    if outer:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
