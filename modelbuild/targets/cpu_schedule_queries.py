"""What the CPU default schedule's rules read of a block and its loops (nothing is
scheduled here): whether it is a reduction or a padding, a loop's extent."""

from __future__ import annotations


def is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)


def loop_extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def pads(sch, block) -> bool:
    """A block writing a bigger buffer than it reads: a padding."""
    b = sch.get(block)
    if len(b.reads) != 1 or len(b.writes) != 1:
        return False
    src, dst = b.reads[0].source, b.writes[0].source
    return [int(d) for d in src.shape] != [int(d) for d in dst.shape] and len(src.shape) == len(dst.shape)
