"""The CPU targets' default schedule: what a workload without a record gets (TVM's own
default is a serial, scalar loop nest: resnet50 ran about 70x slower than onnxruntime).

Rules by the shape of each block, in the spirit of DLight's GPU rules, a module each:

- copies and element-wise epilogues inlined into their consumers, paddings kept apart:
  cpu_schedule_inline.py;
- a channel-blocked convolution (the blocked layout's ``conv2d_NCHWc``, dense or grouped)
  and its epilogue: cpu_schedule_blocked.py;
- a channel-blocked depthwise convolution, its padding and its epilogue:
  cpu_schedule_depthwise.py;
- a matrix product (attention's batched products, a product by a weight, packed in panels
  in the blocked layout) and its epilogue: a register tile of rows x column vectors,
  cpu_schedule_matmul.py;
- another reduction over a weight-like input (a convolution, a matrix product by a
  transposed weight): a block of output channels in vector registers, the blocks in
  parallel: cpu_schedule_conv.py;
- other reductions (pooling, means) and element-wise blocks: the outer loops in parallel,
  vectors inside: cpu_schedule_generic.py; but the blocked layout's channel shuffle, a
  gather, stays a serial scalar loop nest (``SERIAL_GATHER``).

A rule that does not apply leaves the block to TVM's default, and a workload with an
opaque block (sorting, non-max-suppression) is left to it whole: the schedule never
fails a build. It is deterministic (the same workload gives the same schedule)
and its code is part of lower's key.
"""

from __future__ import annotations

from . import cpu_schedule_conv
from .cpu_schedule_generic import elementwise, reduction
from .cpu_schedule_inline import inline_blocks
from .cpu_schedule_queries import is_reduction


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
    from . import cpu_schedule_depthwise as depthwise
    from . import cpu_schedule_matmul as matmul

    root = sch.get_sblock("root", func_name="main")
    if any(_opaque(sch, b) for b in sch.get_child_blocks(root)):
        raise ValueError("an opaque block (an extern-style kernel: sorting, NMS): TVM's default")
    inline_blocks(sch, root)
    done: set[str] = set()
    for name in [sch.get(b).name_hint for b in sch.get_child_blocks(root)]:
        if name in done or name not in _block_names(sch, root):
            continue  # an epilogue a blocked rule took in
        block = sch.get_sblock(name, func_name="main")
        if name == SERIAL_GATHER:
            done.add(name)
        elif is_reduction(sch, block) and blocked.is_blocked_conv(sch, block):
            done.update(blocked.schedule(sch, block, registers))
        elif is_reduction(sch, block) and depthwise.is_depthwise_conv(sch, block):
            done.update(depthwise.schedule(sch, block, registers))
        elif is_reduction(sch, block) and matmul.is_matmul(sch, block):
            done.update(matmul.schedule(sch, block, registers) or ())
    for block in sch.get_child_blocks(root):
        if sch.get(block).name_hint in done:
            continue
        if not is_reduction(sch, block):
            elementwise(sch, block)
        elif not cpu_schedule_conv.schedule(sch, block):
            reduction(sch, block)


# the blocked layout's channel shuffle (steps/channel_shuffle.py): a gather across channel
# blocks, fastest left a serial, scalar loop nest (ShuffleNet's [1, 272, 14, 14] in blocks of
# 16, alone, 2 threads: 16 us; vectors of 16 lanes, each a gather: 41 us; the element-wise
# rule's parallel vectors: 78 us)
SERIAL_GATHER = "channel_shuffle"


def _opaque(sch, block) -> bool:
    """A block without iterators whose body is more than one store (its own loops, while
    loops, in-place updates of other blocks' buffers): the rules would break it (inlining
    a buffer it writes gave "Buffer T_gather is used before its definition" on NMS)."""
    import tvm

    b = sch.get(block)
    return not b.iter_vars and not isinstance(b.body, tvm.tirx.BufferStore)


def _block_names(sch, root) -> set[str]:
    return {sch.get(b).name_hint for b in sch.get_child_blocks(root)}
