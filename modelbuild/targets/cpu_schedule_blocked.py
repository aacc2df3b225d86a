"""The CPU default schedule's rule for channel-blocked convolutions (``conv2d_NCHWc``, the
blocked layout's: see steps/blocked_layout.py), which fills the vector registers:

- the block of output channels (the output's last axis: 16 floats with AVX-512, 8
  with AVX2) is one vector, accumulated in registers;
- a tile of a few output positions of a row x one, two or four such blocks is
  unrolled (``tile``), so each weight vector loaded serves several positions and each
  input broadcast several vectors;
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


def tile(width: int, chunks: int, registers: int) -> tuple[int, int]:
    """(output positions of a row, output channel blocks) whose accumulators the innermost
    loops keep in vector registers: half the CPU's registers (16 of AVX-512's 32, 8 of
    AVX2's 16; the rest hold the weights and the broadcast input). The positions divide
    the row's width and the channel blocks (1, 2 or 4) the output's channel blocks, so no
    loop has a tail; of the tiles with the most accumulators, two channel blocks first:
    each broadcast input then serves two weight vectors, each weight vector several
    positions.

    Measured on resnet50's 23 convolutions, each kernel alone (Zen 5, 2 threads):
    - AVX-512 (block 16): 7 positions x 2 blocks ran the 7x7 layers 1.2-1.25x faster than
      the 7 x 1 of a rule that only unrolled positions (7 accumulators cannot hide the
      FMA's latency on two pipes), the others 1.05-1.15x faster than 14 x 1;
    - AVX2 code (``mcpu=haswell``, block 8, on the same CPU): 4 x 2, 2 x 4 or 7 x 1 (8
      accumulators) were each layer's best, 1.4-1.7x faster than 6 accumulators.
    The same rule for an RGB image's first convolution (an input block of 3): now that it
    writes the model's block, 8 x 2 runs resnet50's 7x7 stride-2 first layer 1.2x faster
    than 7 x 1 (which was best while it wrote NCHW).
    """
    accumulators = max(2, registers // 2)
    tiles = [(p, c) for c in (2, 4, 1) if chunks % c == 0
             for p in [_largest_divisor(width, accumulators // c)]]
    best = max(tiles, key=lambda t: t[0] * t[1])
    return best if best[1] > 1 else _odd_chunks_tile(width, chunks, registers) or best


def _odd_chunks_tile(width: int, chunks: int, registers: int) -> tuple[int, int] | None:
    """The tile of many channel blocks in an odd count (a 1000-class classifier in blocks
    of 8: 125). One block per tile would load an input per multiply-add, so the load ports, not
    the FMA pipes, would bound it (squeezenet's last convolution: 13 x 1 ran at 40% of the
    vectors' peak, and AVX2's 8 accumulators fit no divisor of its 13-wide row but 1: 1 x 1).
    Instead: the smallest divisor of the blocks from 3 to 8 (125: 5) and as many positions
    beside them as keep the accumulators within 5/8 of the registers (the weight vectors and
    the broadcast beside them fill at most the rest): 4 x 5 with AVX-512, 2 x 5 with AVX2.
    The positions need not divide the row: its last tile is partial (TVM predicates it),
    and the tiles are evened out (a 14-wide row with room for 6: 5, 5 and 4, not 6, 6, 2).
    Measured on squeezenet's 512 -> 1000 1x1 convolution over 13 x 13 (cascadelake, 2
    threads, alternating): AVX-512 3.5 ms (13 x 1) -> 2.5 (4 x 5; 3 x 5 2.8, 5 x 5 3.0,
    6 x 5 2.8); AVX2 code 9.0 ms (1 x 1) -> 2.7 (2 x 5; 13 x 1 3.3, 4 x 5 3.6). With no such
    divisor (a prime count of blocks), or for fewer than 17 blocks or an even count, None:
    the divisor rule's tile stands. (Measured the same way, it stayed ahead where this one
    would apply to inception_v1's odd-width rows and its 3, 7 and 9 blocks: 0.8-0.95x
    slower there, 1.2x faster on one.)"""
    blocks = next((c for c in range(3, 9) if chunks % c == 0), None)
    if blocks is None or chunks % 2 == 0 or chunks <= 16:
        return None
    cap = max(1, min(registers * 5 // 8 // blocks, width))
    tiles = -(-width // cap)  # the fewest tiles of at most cap positions, evened out
    return -(-width // tiles), blocks


def _largest_divisor(extent: int, cap: int) -> int:
    return next(d for d in range(min(extent, max(1, cap)), 0, -1) if extent % d == 0)


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
    input_block = _input_block(sch, block)
    positions, channel_blocks = tile(int(sch.get(ow).extent), int(sch.get(oc_chunk).extent),
                                     registers)
    ow_o, ow_i = sch.split(ow, [None, positions])
    ic_o, ic_i = sch.split(ic, [None, input_block])
    oc_o, oc_i = sch.split(oc_chunk, [None, channel_blocks])
    outer = (n, oh, oc_o) if _rows_outside(sch, block) else (n, oc_o, oh)
    sch.reorder(*outer, ow_o, ic_o, kh, kw, ic_i, oc_i, ow_i, oc_block)
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
    sch.unroll(oc_i)
    sch.unroll(ow_i)
    sch.vectorize(oc_block)
    *_, inner = sch.get_loops(writer)
    sch.vectorize(inner)
    init = sch.decompose_reduction(block, ic_o)
    return [sch.get(b).name_hint for b in (block, writer, init)]
