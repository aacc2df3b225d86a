"""The CPU default schedule's rule for channel-blocked depthwise convolutions
(``depthwise_conv2d_NCHWc``, the blocked layout's: see steps/blocked_grouped.py), in the
way of onnxruntime's MLAS NCHWc depthwise kernel and TVM's old x86 schedule:

- the channel block (the output's last axis: 16 floats with AVX-512) is one vector; each
  lane reads only its own channel, so there is no reduction across lanes;
- a few output positions of a row are unrolled beside each other (``positions``), their
  accumulators in registers: each weight vector loaded serves all of them;
- the kernel's rows and columns run outside those positions;
- channel blocks x output rows run in parallel;
- the padding is inlined: a bounds check per vector load (a depthwise convolution does
  only 9 multiply-adds per input float, so a padded copy of the input costs about as
  much as the convolution). Measured on the MobileNetV2 of bench/nets_cnn.py, each of
  its 10 depthwise workloads alone (cascadelake, 2 threads, a loaded machine): 1.3-2.8x
  faster than copying the 3 padded input rows of each output row into a thread's own
  buffer, 2.6 ms against 4.4 ms in all;
- the epilogue (BatchNorm's bias, ReLU6's maximum and minimum, a residual add) is computed
  from the registers as they are written out.
"""

from __future__ import annotations

from .cpu_schedule_queries import pads


def is_depthwise_conv(sch, block) -> bool:
    """A reduction block made by steps/blocked_grouped.depthwise: 5-D output, iterators
    (n, chunk, oh, ow, lane) spatial and (kh, kw) reductions."""
    b = sch.get(block)
    kinds = [int(iv.iter_type) for iv in b.iter_vars]
    return (b.name_hint.startswith("depthwise_conv2d_NCHWc") and kinds == [0, 0, 0, 0, 0, 2, 2]
            and len(b.writes) == 1 and len(b.writes[0].source.shape) == 5
            and len(sch.get_loops(block)) == 7)


def positions(width: int, registers: int) -> int:
    """Output positions of a row whose accumulators stay in registers: the largest divisor
    of the row's width up to half the vector registers (16 with AVX-512, 8 with AVX2), so
    no loop has a tail."""
    cap = max(1, registers // 2)
    return next(d for d in range(min(width, cap), 0, -1) if width % d == 0)


def schedule(sch, block, registers: int) -> list[str]:
    """Schedule the depthwise convolution ``block``, its padding and its epilogue; returns
    the names of the blocks it scheduled (the other rules leave them alone)."""
    n, chunk, oh, ow, lane, kh, kw = sch.get_loops(block)
    ow_o, ow_i = sch.split(ow, [None, positions(int(sch.get(ow).extent), registers)])
    sch.reorder(n, chunk, oh, ow_o, kh, kw, ow_i, lane)
    for pad in [p for p in sch.get_producers(block) if pads(sch, p)]:
        try:
            sch.compute_inline(pad)
        except Exception:  # noqa: BLE001 - another block reads it: a copy of its own
            pass
    consumers = sch.get_consumers(block)
    writer = sch.cache_write(block, 0, "local")
    if len(consumers) == 1:  # the epilogue, computed as the registers are written out
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - not inlinable: computed after the row instead
            pass
    sch.reverse_compute_at(writer, ow_o)
    row = sch.fuse(n, chunk, oh)
    sch.parallel(row)
    sch.unroll(ow_i)
    sch.vectorize(lane)
    *_, inner = sch.get_loops(writer)
    sch.vectorize(inner)
    init = sch.decompose_reduction(block, kh)
    return [sch.get(b).name_hint for b in (block, writer, init)]
