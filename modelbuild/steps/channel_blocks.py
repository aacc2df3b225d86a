"""One channel block per group of tensors that ConvertLayout must give the same layout: the
tensors a concat of channels joins, and those an operator carries along unchanged
(element-wise, pooling, the residual add). blocked_layout.convert asks each convolution
for the blocks of its input's and its output's group (``tensor_blocks``).

A tensor's own block (its channels' greatest common divisor with the target's block) is
not enough where a concat joins tensors of different blocks: ShuffleNet's 24 channels
(blocks of 8) beside 112 (blocks of 16) made TVM's ConvertLayout fail on the whole graph
("Invalid layout axis 16b"), and the graph between the convolutions stayed NCHW.
"""

from __future__ import annotations

import math


def tensor_blocks(mod) -> tuple[dict, dict]:
    """({variable: its group's channel count} for the 4-D tensors of ``mod``'s functions:
    the greatest common divisor of the channels of every tensor in the group, which
    ``block_of`` turns into a block; {call: the variable bound to it})."""
    from tvm import relax

    parent: dict = {}

    def find(var):
        parent.setdefault(var, var)
        while not parent[var].same_as(var):
            parent[var] = parent[parent[var]]
            var = parent[var]
        return var

    def union(a, b):
        ra, rb = find(a), find(b)
        if not ra.same_as(rb):
            parent[ra] = rb

    channels: dict = {}
    bound: dict = {}
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for param in func.params:
            _note(param, channels)
        for block_ in getattr(func.body, "blocks", []):
            for binding in block_.bindings:
                var, value = binding.var, binding.value
                bound[value] = var
                if _note(var, channels) is None:
                    continue
                for arg in _joined(value, var):
                    if _note(arg, channels) is not None:
                        union(var, arg)
    groups: dict = {}
    for var in channels:
        root = find(var)
        groups[root] = math.gcd(groups.get(root, 0), channels[var])
    return {var: groups[find(var)] for var in channels}, bound


def block_of(channels: int, block: int) -> int:
    """The block of a group whose channels have ``channels`` as greatest common divisor:
    ``block``, or all of them when fewer (an RGB image's 3), or their greatest common
    divisor with ``block``."""
    return channels if channels < block else math.gcd(channels, block)


def _note(expr, channels: dict) -> int | None:
    """Record the channels of a 4-D tensor variable ``expr``; None for anything else."""
    from tvm import relax

    from .rewrite_pass import static_shape

    if not isinstance(expr, relax.Var):
        return None
    shape = static_shape(expr)
    if shape is None or len(shape) != 4 or shape[1] < 1:
        return None
    channels[expr] = shape[1]
    return shape[1]


_CARRIED = ("relax.nn.conv2d",)  # operators whose output's channels are their own


def _joined(value, var) -> list:
    """The variables that ``var = value`` joins to ``var``'s group: a concat of channels'
    inputs; an operator's 4-D inputs with ``var``'s channels (a convolution's output is its
    own)."""
    import tvm
    from tvm import relax

    from .rewrite_pass import static_shape

    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return []
    name = value.op.name
    if name in _CARRIED:
        return []
    if name == "relax.concat":
        fields = value.args[0]
        axis = value.attrs.axis
        if isinstance(fields, relax.Tuple) and axis is not None and int(axis) % 4 == 1:
            return list(fields.fields)
        return []
    own = static_shape(var)
    return [arg for arg in value.args
            if isinstance(arg, relax.Var) and (shape := static_shape(arg)) is not None
            and len(shape) == 4 and shape[1] == own[1]]
