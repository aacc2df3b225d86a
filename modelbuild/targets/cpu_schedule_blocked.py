"""The CPU default schedule's rule for channel-blocked convolutions (``conv2d_NCHWc``, the
blocked layout's: see steps/blocked_layout.py), which fills the vector registers:

- the block of output channels (the output's last axis: 16 floats with AVX-512, 8
  with AVX2) is one vector, accumulated in registers;
- a few output positions of a row (a divisor of its width up to ``positions``) are
  unrolled beside it, so each weight vector loaded serves them all;
- the reduction runs outside them: blocks of input channels, the kernel's rows and
  columns, then the input channels of one block (contiguous in the input and in the
  weights, which partition laid out as ``OIHW{b}i{b}o`` constants: nothing is
  repacked at run time);
- the output's channel blocks x rows run in parallel (rows outside when the input is
  bigger than the weights, so that tasks running together share input rows);
- the epilogue (bias, residual add, ReLU: one block once the schedule inlined the
  element-wise blocks into each other) is computed from the registers as they are
  written out.

A convolution this rule does not recognise is left to the other rules; an error
leaves the whole workload to TVM's default (cpu_schedule.default_schedule).
"""

from __future__ import annotations

def is_blocked_conv(sch, block) -> bool:
    """A reduction block made by ``topi.nn.conv2d_NCHWc``: 5-D output, iterators
    (n, oc_chunk, oh, ow, oc_block) spatial and (ic, kh, kw) reductions."""
    b = sch.get(block)
    kinds = [int(iv.iter_type) for iv in b.iter_vars]
    return (b.name_hint.startswith("conv2d_NCHWc") and kinds == [0, 0, 0, 0, 0, 2, 2, 2]
            and len(b.writes) == 1 and len(b.writes[0].source.shape) == 5
            and len(sch.get_loops(block)) == 8)


def positions(width: int, registers: int) -> int:
    """Output positions unrolled beside the channel vector: about half the CPU's vector
    registers hold accumulators (16 of AVX-512's 32, 6 of AVX2's 16), a divisor of the
    row's width. The registers are the CPU's, not the block's: a block of 8 channels on an
    AVX-512 CPU (the 1000 classes of squeezenet's last convolution) still has 32."""
    cap = max(1, registers // 2 - (0 if registers >= 32 else 2))
    return next(d for d in range(min(width, cap), 0, -1) if width % d == 0)


def _rows_outside(sch, block) -> bool:
    """Whether the parallel loop runs rows outside channel blocks: when the input is bigger
    than the weights (early layers), so that the tasks running together read the same input
    rows while the weights stay in cache; else (late layers: small activations, big
    weights) each block of weights serves every row before the next is read."""
    import math

    reads = sch.get(block).reads
    size = {len(r.source.shape): math.prod(int(d) for d in r.source.shape) for r in reads}
    return size.get(5, 0) >= size.get(6, 0)


def _input_block(sch, block) -> int:
    """The input's channel block: the weights' (``OIHW{i}i{o}o``) fifth axis."""
    weights = next(r for r in sch.get(block).reads if len(r.source.shape) == 6)
    return int(weights.source.shape[4])


def schedule(sch, block, registers: int) -> list[str]:
    """Schedule the blocked convolution ``block`` and its epilogue; returns the names of the
    blocks it scheduled (the other rules leave them alone)."""
    n, oc_chunk, oh, ow, oc_block, ic, kh, kw = sch.get_loops(block)
    ow_o, ow_i = sch.split(ow, [None, positions(int(sch.get(ow).extent), registers)])
    ic_o, ic_i = sch.split(ic, [None, _input_block(sch, block)])
    outer = (n, oh, oc_chunk) if _rows_outside(sch, block) else (n, oc_chunk, oh)
    sch.reorder(*outer, ow_o, ic_o, kh, kw, ic_i, ow_i, oc_block)
    consumers = sch.get_consumers(block)
    cache = sch.cache_write(block, 0, "local")
    writer = cache
    if len(consumers) == 1:  # the epilogue, computed as the registers are written out
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - not inlinable: computed after the row instead
            pass
    sch.reverse_compute_at(writer, ow_o)
    sch.parallel(sch.fuse(*outer))
    sch.unroll(ow_i)
    sch.vectorize(oc_block)
    *_, inner = sch.get_loops(writer)
    sch.vectorize(inner)
    init = sch.decompose_reduction(block, ic_o)
    return [sch.get(b).name_hint for b in (block, writer, init)]
