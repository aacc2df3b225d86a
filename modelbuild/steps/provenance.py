"""Provenance: which operators of the model each workload computes, traced during partition.

Fusion renames and merges operators (``fused_conv2d13_add10_add11_relu8``).
This follows every operator of the model through the passes partition runs,
in the modules partition makes anyway (nothing is imported or fused twice):

1. Import. The ONNX importer keeps, per ONNX tensor, the Relax expression
   computing it: the binding of ``main`` holding a node's output belongs to the
   node, and so does every binding made on the way to it (it goes with its
   first user).
2. ``LegalizeOps`` and ``FoldConstant`` keep each surviving binding's variable
   (the same object). A binding legalization adds belongs with the binding it
   was added for, the next one; a binding ``FoldConstant`` removed was folded
   into a constant.
3. ``FuseOps`` does not say which bindings it grouped. It is run once more, on a
   copy of its input in which every ``call_tir`` calls a GlobalVar of its own
   (bound to a copy of the same PrimFunc: same fusion decisions); the
   GlobalVars inside each fused function then name its members. That run's
   ``main`` lines up binding by binding with the real one after ``FuseTIR``,
   whose calls name the workloads.

Each operator ends with the workload computing its output (and any other
workloads computing part of it), or with the reason it has none.

A ``layout_transform`` that ``ConvertLayout`` adds (the blocked layout's changes at
the graph's edges and around operators that cannot take it) is no operator's: the
workloads computing one are listed as the layout's, not charged to a neighbour.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.manifest import Operator

FOLDED = "folded into constants"
LAYOUT = -1  # the owner of a binding the build's layout added: no operator of the model


class TraceError(Exception):
    """The passes did something this tracer does not understand."""


@dataclass
class SourceOp:
    """One operator of the model as imported: its name, its type, the Relax
    expressions of its outputs."""

    name: str
    op_type: str
    outputs: list = field(default_factory=list)


def onnx_operators(graph, tensors: dict) -> list[SourceOp]:
    """The nodes of an ONNX graph, with the expressions the importer made for their outputs.

    ``tensors``: the importer's map from ONNX tensor name to Relax expression.
    An unnamed node is named by its first output (unique in ONNX).
    """
    taken = {n.name for n in graph.node if n.name}
    ops = []
    for index, node in enumerate(graph.node):
        name = node.name
        if not name:
            first = node.output[0] if node.output else ""
            name = first if first and first not in taken else f"#{index}"
            taken.add(name)
        ops.append(SourceOp(name, node.op_type, [tensors.get(o) for o in node.output if o]))
    return ops


def relax_operators(mod) -> list[SourceOp]:
    """For a model that is Relax already: each binding of ``main`` is an operator,
    named by its variable."""
    return [SourceOp(b.var.name, _describe(b.value), [b.var]) for b in _bindings(mod["main"])]


def trace(ops: list[SourceOp], stages: dict,
          workloads) -> tuple[tuple[Operator, ...], tuple[tuple[str, str], ...]]:
    """Where each operator went, from the modules partition made; and the workloads
    computing a change of layout the build's layout added, each with the operator whose
    input it converts ("" when no operator uses it: the graph returns it), in model order.

    ``stages``: the imported module ("import") and the modules after each pass of
    core/passes.py's PASSES (at least "FoldConstant" and "FuseTIR"); ``workloads``: the
    names of the workloads.
    """
    owners, notes = _owners_at_import(ops, stages["import"]["main"])
    imported = {o for o in owners if o is not None}
    from ..core.passes import PASSES

    names = ["import", *[n for n in PASSES[:PASSES.index("FoldConstant") + 1] if n in stages]]
    for earlier, later in zip(names, names[1:]):
        owners = _carry(_bindings(stages[earlier]["main"]), owners,
                        _bindings(stages[later]["main"]))
    kernel_of = _kernels(stages["FoldConstant"], stages["FuseTIR"], set(workloads))

    kernels: dict[int, list[str]] = {}
    survivors: dict[int, list[str]] = {}
    folded = _bindings(stages["FoldConstant"]["main"])
    layout: dict[str, str] = {}
    users = _users(folded) if LAYOUT in owners else {}
    for i, (owner, binding, kernel) in enumerate(zip(owners, folded, kernel_of)):
        if owner == LAYOUT and kernel is not None:
            user = _first_user(users, owners, i)
            layout.setdefault(kernel, ops[user].name if user is not None else "")
        if owner is None or owner == LAYOUT:
            continue
        survivors.setdefault(owner, []).append(_describe(binding.value))
        if kernel is not None:
            kernels.setdefault(owner, []).append(kernel)

    result = []
    for k, op in enumerate(ops):
        if k in kernels:
            primary = kernels[k][-1]  # the output is computed last
            also = tuple(n for n in dict.fromkeys(kernels[k]) if n != primary)
            result.append(Operator(op.name, op.op_type, primary, "", also))
        elif k in survivors:
            how = ", ".join(dict.fromkeys(survivors[k]))
            result.append(Operator(op.name, op.op_type, None,
                                   f"no kernel: runs in the graph ({how})"))
        elif k in imported:
            result.append(Operator(op.name, op.op_type, None, FOLDED))
        else:
            result.append(Operator(op.name, op.op_type, None,
                                   notes.get(k, "no kernel: the importer made nothing for it")))
    return tuple(result), tuple(layout.items())


def _users(bindings: list) -> dict[int, list[int]]:
    """For each binding (by index), the later bindings using its variable, in order."""
    from tvm import relax

    by_var = {_key(b.var): i for i, b in enumerate(bindings)}
    users: dict[int, list[int]] = {}
    for i, b in enumerate(bindings):
        for v in relax.analysis.free_vars(b.value):
            j = by_var.get(_key(v))
            if j is not None:
                users.setdefault(j, []).append(i)
    return users


def _first_user(users: dict, owners: list, start: int) -> int | None:
    """The operator owning the first binding that uses ``start``'s variable, looking
    through bindings no operator owns (other layout changes)."""
    pending, seen, best = [start], {start}, None
    while pending:
        for u in users.get(pending.pop(), []):
            if u in seen:
                continue
            seen.add(u)
            if owners[u] is not None and owners[u] != LAYOUT:
                best = u if best is None else min(best, u)
            else:
                pending.append(u)
    return owners[best] if best is not None else None


# -- step 1: the imported module ----------------------------------------------------

def _owners_at_import(ops: list[SourceOp], main) -> tuple[list, dict]:
    """The owning operator (index into ``ops``, or None) of each binding of the imported
    ``main``; and for operators whose outputs have no binding of their own, why."""
    from tvm import ir, relax

    binds = _bindings(main)
    by_value = {_key(b.value): i for i, b in enumerate(binds)}
    by_var = {_key(b.var): i for i, b in enumerate(binds)}
    params = {_key(p) for p in main.params}
    owner: list = [None] * len(binds)
    notes: dict[int, str] = {}
    for k, op in enumerate(ops):
        reasons = []
        for expr in _flatten(op.outputs):
            i = None
            if isinstance(expr, relax.Var):
                i = by_var.get(_key(expr))
                if i is None:
                    reasons.append("no kernel: passes a model input through"
                                   if _key(expr) in params else "no kernel: passes a value through")
            elif isinstance(expr, ir.Call):
                i = by_value.get(_key(expr))
                if i is None:
                    reasons.append("no kernel: its result is unused")
            elif isinstance(expr, ir.GenericConst):
                reasons.append(FOLDED + " (at import)")
            elif isinstance(expr, (relax.ShapeExpr, ir.StringImm)) or ir.is_prim_expr(expr):
                reasons.append("no kernel: a shape or value known at import")
            elif expr is not None:
                reasons.append(f"no kernel: imported as {type(expr).__name__}")
            if i is None:
                continue
            if owner[i] is None:
                owner[i] = k
            else:
                reasons.append(f"no kernel: passes its input through (the output of "
                               f"{ops[owner[i]].name})")
        if reasons:
            notes[k] = "; ".join(dict.fromkeys(reasons))

    # A binding no output claims was made on the way to one: it goes with its first user.
    users = _users(binds)
    for i in reversed(range(len(binds))):
        if owner[i] is None:
            owner[i] = next((owner[u] for u in users.get(i, []) if owner[u] is not None), None)
    return owner, notes


# -- step 2: passes that keep bindings ----------------------------------------------

def _carry(before: list, owners: list, after: list) -> list:
    """Owners of the bindings ``after`` a pass, from those ``before`` it, by variable.
    A binding the pass made in place of others (a conv with a BatchNorm folded in) takes
    the owner of a binding of the same operator that vanished at that place; a
    ``layout_transform`` it added is the layout's (``LAYOUT``); another binding it added
    goes with the next binding that was there before."""
    known = {_key(b.var): o for b, o in zip(before, owners)}
    position = {_key(b.var): i for i, b in enumerate(before)}
    out: list = [None] * len(after)
    i, previous = 0, -1
    while i < len(after):
        if _key(after[i].var) in known:
            out[i], previous = known[_key(after[i].var)], position[_key(after[i].var)]
            i += 1
            continue
        j = i
        while j < len(after) and _key(after[j].var) not in known:
            j += 1
        following = position[_key(after[j].var)] if j < len(after) else len(before)
        pending = known[_key(after[j].var)] if j < len(after) else None
        vanished = [(_op(before[p].value), owners[p]) for p in range(previous + 1, following)]
        for t in range(i, j):
            op = _op(after[t].value)
            match = next((q for q, (name, _) in enumerate(vanished) if op and name == op), None)
            if match is not None:
                out[t] = vanished.pop(match)[1]
            else:
                out[t] = LAYOUT if op == "relax.layout_transform" else pending
        i = j
    return out


def _op(value) -> str:
    """The operator a binding calls ("" for anything else)."""
    from tvm import ir

    op = getattr(value, "op", None)
    return op.name if isinstance(value, ir.Call) and isinstance(op, ir.Op) else ""


# -- step 3: fusion -------------------------------------------------------------------

def _kernels(before_fusion, fused, workloads: set) -> list:
    """For each binding of ``before_fusion``'s main: the workload computing it, or None."""
    from tvm import ir, relax

    tagged, tags = _tagged(before_fusion)
    traced = relax.transform.FuseOps()(tagged)
    binds = _bindings(before_fusion["main"])
    index = {_key(b.var): i for i, b in enumerate(binds)}
    # Tuples and their items compute nothing; FuseTIR drops some that FuseOps kept (those
    # around a split written as slices, convert_layout_fixes.for_convert_layout)
    ours, theirs = (_computing(_bindings(m["main"])) for m in (traced, fused))
    if [b.var.name for b in ours] != [b.var.name for b in theirs]:
        raise TraceError("the traced fusion does not line up with partition's")
    kernel_of: list = [None] * len(binds)
    for mine, real in zip(ours, theirs):
        value = real.value
        callee = value.args[0] if isinstance(value, ir.Call) and value.args else None
        name = callee.name_hint if isinstance(callee, ir.GlobalVar) else None
        for i in _members(traced, mine, tags, index):
            kernel_of[i] = name if name in workloads else None
    return kernel_of


def _tagged(mod):
    """``mod`` with every call_tir of main calling a GlobalVar of its own; and
    tag -> index of the binding."""
    import tvm
    from tvm import ir, relax

    call_tir = ir.Op.get("relax.call_tir")
    main = mod["main"]
    funcs = dict(mod.functions.items())
    tags: dict[int, int] = {}
    blocks = []
    index = 0
    for block in main.body.blocks:
        bindings = []
        for b in block.bindings:
            value = b.value
            if isinstance(value, ir.Call) and value.op.same_as(call_tir):
                tag = ir.GlobalVar(f"binding{index}")
                relax.expr._update_type(tag, value.args[0].ty)
                # A copy of the PrimFunc (one more attribute): one function, one name.
                funcs[tag] = mod[value.args[0]].with_attr("modelbuild.binding", index)
                tags[_key(tag)] = index
                value = ir.Call(value.op, [tag, *value.args[1:]], value.attrs, value.ty_args)
                b = relax.VarBinding(b.var, value)
            bindings.append(b)
            index += 1
        blocks.append(type(block)(bindings))
    new_main = relax.Function(main.params, relax.SeqExpr(blocks, main.body.body),
                              main.ret_ty, main.is_pure, main.attrs)
    # Normalized now: FuseOps keys functions by structural hash, which must not change under it.
    funcs[mod.get_global_var("main")] = relax.BlockBuilder().normalize(new_main)
    return tvm.IRModule(funcs, attrs=mod.attrs), tags


def _members(mod, binding, tags: dict, index: dict) -> list[int]:
    """The bindings before fusion that one binding of the traced fused main computes."""
    from tvm import ir

    def computed(b) -> list[int]:
        value = b.value
        if isinstance(value, ir.Call) and isinstance(value.op, ir.GlobalVar):
            return [m for inner in _bindings(mod[value.op]) for m in computed(inner)]
        if isinstance(value, ir.Call) and value.args and _key(value.args[0]) in tags:
            return [tags[_key(value.args[0])]]
        return [index[_key(b.var)]] if _key(b.var) in index else []

    return computed(binding)


# -- helpers -------------------------------------------------------------------------

def _bindings(func) -> list:
    return [b for block in func.body.blocks for b in block.bindings]


def _computing(bindings: list) -> list:
    """The bindings that are not a tuple or a tuple's item."""
    from tvm import relax

    return [b for b in bindings if not isinstance(b.value, (relax.Tuple, relax.TupleGetItem))]


def _key(obj) -> int:
    return obj.id_  # the object's address: stable while the modules are alive


def _flatten(exprs):
    from tvm import relax

    for e in exprs:
        if isinstance(e, relax.Tuple):
            yield from _flatten(list(e.fields))
        else:
            yield e


def _describe(value) -> str:
    from tvm import ir

    if isinstance(value, ir.Call) and isinstance(value.op, ir.Op):
        return value.op.name.removeprefix("relax.")
    return type(value).__name__
