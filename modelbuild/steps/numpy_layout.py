"""A layout_transform of a constant computed in numpy (constant_folding's, for the blocked
layout's weights and data): TVM's IndexMap.map_tensor evaluates the index map element by
element."""

from __future__ import annotations


def map_layout(index_map, source, shape: list):
    """``source`` laid out by ``index_map`` (a bijection: no padding), in numpy: each output
    index computed from the grid of input indices (TVM's IndexMap.map_tensor evaluates it
    element by element: 9 s for one 512x512x3x3 weight). None for an expression this
    evaluator does not know."""
    import numpy as np
    from tvm import tirx

    moved = _split_and_permute(index_map, source, shape)
    if moved is not None:
        return moved
    grid = dict(zip((v.name for v in index_map.initial_indices), np.indices(source.shape)))
    ops = {tirx.FloorDiv: np.floor_divide, tirx.FloorMod: np.mod, tirx.Add: np.add,
           tirx.Sub: np.subtract, tirx.Mul: np.multiply}

    def value(expr):
        if isinstance(expr, tirx.Var):
            return grid[expr.name]
        if isinstance(expr, tirx.IntImm):
            return int(expr.value)
        apply = ops.get(type(expr))
        if apply is None:
            raise KeyError(type(expr).__name__)
        return apply(value(expr.a), value(expr.b))

    try:
        where = tuple(np.broadcast_to(value(e), source.shape) for e in index_map.final_indices)
    except KeyError:
        return None
    if len(where) != len(shape):
        return None
    out = np.empty(shape, source.dtype)
    out[where] = source
    return out


def _split_and_permute(index_map, source, shape: list):
    """``source`` laid out by ``index_map`` when every output index is an input index, or
    an input index floor-divided or taken modulo one factor (the blocked layouts of
    weights and data: ``OIHW -> OIHW{i}i{o}o``, ``NCHW -> NCHW{b}c``): a reshape that
    splits those axes, then a transpose. Without the index grids of the general path:
    resnet50's 106 weight transforms took 1.4 s of its 4.8 s partition that way. None for
    any other index map."""
    from tvm import tirx

    names = [v.name for v in index_map.initial_indices]
    factors: dict[str, int] = {}
    picks = []  # per output axis: (input name, "whole" | "outer" | "inner")
    for expr in index_map.final_indices:
        if isinstance(expr, tirx.Var) and expr.name in names:
            picks.append((expr.name, "whole"))
            continue
        if not (isinstance(expr, (tirx.FloorDiv, tirx.FloorMod)) and isinstance(expr.a, tirx.Var)
                and expr.a.name in names and isinstance(expr.b, tirx.IntImm)):
            return None
        name, factor = expr.a.name, int(expr.b.value)
        if factor <= 0 or factors.setdefault(name, factor) != factor:
            return None
        picks.append((name, "outer" if isinstance(expr, tirx.FloorDiv) else "inner"))
    dims, axis = [], {}
    for name, size in zip(names, source.shape):
        if name in factors:
            if size % factors[name]:
                return None
            axis[(name, "outer")], axis[(name, "inner")] = len(dims), len(dims) + 1
            dims += [size // factors[name], factors[name]]
        else:
            axis[(name, "whole")] = len(dims)
            dims.append(size)
    try:
        order = [axis[pick] for pick in picks]
    except KeyError:  # a split axis used whole, or a whole one split
        return None
    if sorted(order) != list(range(len(dims))):
        return None
    out = source.reshape(dims).transpose(order)
    return out if list(out.shape) == list(shape) else None
