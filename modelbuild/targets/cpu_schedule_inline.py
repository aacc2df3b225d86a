"""The CPU default schedule's first rule: a copy of a tensor into an equal-shaped buffer is
inlined into its consumer, as are element-wise epilogues (a bias add, a ReLU) into the
reduction before them; a padding copy stays apart (inlined, its bounds checks would sit in
the innermost loop). An inline that would make an expression too big to compile is not
made (``INLINED_NODES_MAX``, ``DATA_SELECTS_MAX``)."""

from __future__ import annotations

from .cpu_schedule_queries import is_reduction, pads


def inline_blocks(sch, root) -> None:
    """Inline copies and epilogues (not padding: see the module's docstring), until none is
    left or inlining one more would make an expression too big to compile (``_grows``)."""
    changed = True
    while changed:
        changed = False
        for block in sch.get_child_blocks(root):
            if is_reduction(sch, block) or pads(sch, block):
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
