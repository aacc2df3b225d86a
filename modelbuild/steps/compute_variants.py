"""Compute variants: other computes of a workload's operator, beside the one partition fuses.

A variant is a rule keyed by an operator pattern: which calls it applies to (``eligible``)
and how to legalize such a call with another compute (``legalize``). Winograd (F(4x4, 3x3),
``topi.nn.conv2d_winograd_nchw``) applies to a float32 NCHW/OIHW conv2d with a 3x3 kernel,
stride 1, dilation 1, one group; in the blocked layout (NCHW{b}c/OIHW{b}i{b}o) the same
conv computes Winograd between a transform of its input and weights to NCHW/OIHW and of
its output back (the weights' transform runs in the kernel, as Winograd's own does).

How a variant's TIR is made, for every workload at once (``variant_workloads``): the fused
graph is kept as it is (the grouping FuseOps chose, the graph's calls, the constants); in the
module after FuseOps, the PrimFunc an eligible call legalized to is replaced by the variant's
PrimFunc (same parameters, same output), and the passes after FuseOps (FuseTIR) run again.
So a variant workload takes the same arguments as the direct one: the graph does not depend
on which compute a workload uses, and switching compute reruns no graph step. The weight
transform of Winograd is inside the kernel: it runs on every call (about 160 FLOPs per
kernel element: small next to the batched GEMM on a 56x56 map, about as much as it on a 7x7
one); pre-transforming the constant weights at build time would make the graph depend on the
choice, and a switch would rerun partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import blocked_layout
from .graph_passes import pipeline

DIRECT = "direct"  # the compute partition fuses: every workload has it


@dataclass(frozen=True)
class Variant:
    name: str
    op: str                          # the Relax operator it replaces
    eligible: Callable               # (call) -> bool
    legalize: Callable               # (bb, call, block) -> the call legalized with this compute


def _static(shape) -> list[int] | None:
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):
        return None


def _layouts(attrs) -> tuple[str, str, str]:
    return str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)


def _winograd_eligible(call) -> bool:
    a = call.attrs
    data, weight = (getattr(x, "ty", None) for x in call.args[:2])
    if data is None or weight is None or getattr(weight, "shape", None) is None:
        return False
    kshape = _static(weight.shape)
    return ((_layouts(a) == ("NCHW", "OIHW", "NCHW") or blocked_layout.is_blocked(a))
            and int(a.groups) == 1 and [int(s) for s in a.strides] == [1, 1] and [int(d) for d in a.dilation] == [1, 1]
            and kshape is not None and kshape[2:4] == [3, 3]
            and _static(data.shape) is not None
            and str(data.dtype) == "float32" and str(weight.dtype) == "float32"
            and str(a.out_dtype or "") in ("", "float32"))


def _winograd_legalize(bb, call, block: int | None = None):
    """Winograd for ``call`` taking the arguments partition's legalization gives the direct
    compute: NCHW/OIHW; a blocked conv's blocked data and weights; in the blocked layout, a
    conv left NCHW its weights as blocked_layout._reblocked lays them out (a constant)."""
    from tvm import topi

    a = call.attrs
    data_layout, kernel_layout, _ = _layouts(a)
    out_layout = "NCHW"
    weights = call.args[1]
    blocked = blocked_layout.is_blocked(a)
    reblocked = None if block is None or blocked else blocked_layout.blocks(call, block)
    if blocked:
        out_layout = str(a.out_layout)
    elif reblocked is not None:
        inner, outer = reblocked
        kernel_layout = f"OIHW{inner}i{outer}o"
        weights = bb.emit_te(topi.layout_transform, weights, "OIHW", kernel_layout,
                             primfunc_name_hint="weight_layout")

    strides, padding, dilation = ([int(v) for v in x] for x in (a.strides, a.padding, a.dilation))

    def winograd(data, kernel):
        data = topi.layout_transform(data, data_layout, "NCHW")
        kernel = topi.layout_transform(kernel, kernel_layout, "OIHW")
        out = winograd_nchw(data, kernel, padding)
        return topi.layout_transform(out, "NCHW", out_layout)

    if (data_layout, kernel_layout, out_layout) == ("NCHW", "OIHW", "NCHW"):
        return bb.call_te(winograd_nchw, call.args[0], weights, padding,
                          primfunc_name_hint="conv2d_winograd")
    return bb.call_te(winograd, call.args[0], weights, primfunc_name_hint="conv2d_winograd")


def winograd_nchw(data, kernel, padding):
    """TOPI's ``conv2d_winograd_nchw`` (3x3, stride 1, 4x4 output tiles) of an NCHW ``data``,
    made safe for an output whose height or width is no multiple of 4: TOPI's tiles then
    read rows and columns past its padded input, which the default schedule hides (the
    padding inlined, bounds checked) and a sampled record that keeps the padded input in a
    buffer does not (garbage out, exit 0). The input gets zero rows and columns at the bottom
    and right up to whole tiles, and the output is cut back to its size: the same numbers."""
    from tvm import te, topi
    from tvm.topi.nn.utils import get_pad_tuple

    n, _, h, w = (int(d) for d in data.shape)
    co = int(kernel.shape[0])
    pt, pl, pb, pr = get_pad_tuple(padding, (3, 3))
    out_h, out_w = h + pt + pb - 2, w + pl + pr - 2
    extra_h, extra_w = -out_h % _TILE, -out_w % _TILE
    if extra_h or extra_w:
        data = topi.nn.pad(data, (0, 0, 0, 0), (0, 0, extra_h, extra_w), name="whole_tiles")
    out = topi.nn.conv2d_winograd_nchw(data, kernel, strides=[1, 1], padding=padding,
                                       dilation=[1, 1], out_dtype="float32")
    if not (extra_h or extra_w):
        return out
    return te.compute((n, co, out_h, out_w), lambda *i: out[i], name="conv2d_winograd_cut")


_TILE = 4  # topi.nn.conv2d_winograd_nchw's output tile


def _direct_legalize(call, block: int | None):
    """How partition legalized ``call``: in the blocked layout (``block``), a conv2d by the
    layout's own rule (steps/blocked_layout.py); else TVM's (None)."""
    if block is None or call.op.name != "relax.nn.conv2d":
        return None
    return blocked_layout.legalize_map(block)["relax.nn.conv2d"]


VARIANTS = (
    Variant("winograd", "relax.nn.conv2d", _winograd_eligible, _winograd_legalize),
)


def names() -> list[str]:
    """Every compute a workload can name (``direct`` first)."""
    return [DIRECT, *(v.name for v in VARIANTS)]


def _calls(mod, op_name: str):
    """The calls of ``op_name`` in every Relax function of ``mod``."""
    import tvm
    from tvm import relax

    op = tvm.ir.Op.get(op_name)
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for block in getattr(func.body, "blocks", ()):
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and value.op.same_as(op):
                    yield value


def _legalized(call, legalize=None):
    """The PrimFunc one call legalizes to (with ``legalize``: that compute; else TVM's)."""
    import tvm
    from tvm import relax

    params = [relax.Var(f"p{i}", arg.ty) for i, arg in enumerate(call.args)]
    body = relax.Call(call.op, params, call.attrs)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        out = bb.emit(body)
        bb.emit_func_output(out)
    custom = {call.op.name: legalize} if legalize else None
    mod = relax.transform.LegalizeOps(customize_legalize_map=custom)(bb.get())
    return next(f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
                and not gv.name_hint.startswith("weight_layout"))  # a constant's, folded


def _replacements(imported, legalized_mod, variant: Variant, block: int | None) -> dict:
    """Name of a PrimFunc of the legalized module -> the variant's PrimFunc for it."""
    import functools

    import tvm
    import tvm_ffi

    prims = {gv.name_hint: f for gv, f in legalized_mod.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc)}
    out: dict = {}
    # Calls already matched: a call of the same attributes and argument types legalizes to
    # the same PrimFuncs (resnet50: 13 eligible convs, 4 distinct).
    done: list = []
    for call in _calls(imported, variant.op):
        if not variant.eligible(call) or any(_same_call(call, d) for d in done):
            continue
        done.append(call)
        direct = _legalized(call, _direct_legalize(call, block))
        replacement = None
        for name, func in prims.items():
            if name not in out and tvm_ffi.structural_equal(func, direct):
                if replacement is None:
                    replacement = _legalized(call, functools.partial(variant.legalize,
                                                                     block=block))
                out[name] = replacement
    return out


def _same_call(a, b) -> bool:
    """Whether calls ``a`` and ``b`` legalize alike: same operator, attributes and
    argument types (shapes, dtypes), whatever their arguments."""
    import tvm_ffi

    return (a.op.same_as(b.op) and len(a.args) == len(b.args)
            and tvm_ffi.structural_equal(a.attrs, b.attrs)
            and all(tvm_ffi.structural_equal(x.ty, y.ty) for x, y in zip(a.args, b.args)))


def variant_workloads(stages: dict, passes: tuple, target, workloads: dict,
                      block: int | None = None) -> dict:
    """{variant name: {workload name: PrimFunc}}: the workloads of the fused module that have
    the variant's compute, each with its TIR. ``stages``: the module after each pass of
    ``passes`` (and "import"), as partition made them (passes before LegalizeOps, a layout
    conversion say, are taken into account: the calls looked at are those LegalizeOps
    legalized); ``workloads``: the direct workloads by name; ``block``: the blocked layout's
    channel block (None: NCHW), as partition legalized with it."""
    import tvm
    import tvm_ffi

    if "FuseOps" not in stages or "LegalizeOps" not in stages:
        return {}
    after = passes[passes.index("FuseOps") + 1:]
    steps = dict(pipeline(block))
    legalize = passes.index("LegalizeOps")
    before = stages[passes[legalize - 1]] if legalize else stages["import"]  # what it legalized
    out: dict = {}
    for variant in VARIANTS:
        with target:  # the blocked layout's conv2d legalizes for the target
            swap = _replacements(before, stages["LegalizeOps"], variant, block)
        if not swap:
            continue
        mod = stages["FuseOps"]
        for gv, func in list(mod.functions.items()):
            if gv.name_hint in swap:
                mod = _with(mod, gv, swap[gv.name_hint].with_attrs(func.attrs))
        with target:
            for name in after:  # partition's own passes: the same workload names
                mod = steps[name](mod)
        found = {gv.name_hint: f for gv, f in mod.functions.items()
                 if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint in workloads
                 and not tvm_ffi.structural_equal(f, workloads[gv.name_hint])}
        if found:
            out[variant.name] = dict(sorted(found.items()))
    return out


def _with(mod, gv, func):
    import tvm

    funcs = dict(mod.functions.items())
    funcs[gv] = func
    return tvm.IRModule(funcs, attrs=mod.attrs, global_infos=mod.global_infos)


def write(layout, stages: dict, passes: tuple, target, workloads: dict,
          block: int | None = None) -> list:
    """Write every variant workload's TIR beside the direct one
    (``layout.workload(name, variant)``); returns the paths written (partition records them
    among its outputs, so a cached partition restores them)."""
    import tvm

    from ..core import atomic

    written = []
    for variant, funcs in variant_workloads(stages, passes, target, workloads, block).items():
        for name, func in funcs.items():
            path = layout.workload(name, variant)
            atomic.write_text(path, tvm.ir.save_json(func))
            written.append(path)
    if layout.computes_dir.is_dir():  # those of an earlier partition that this one lacks
        atomic.sweep(layout.computes_dir.glob("*.json"), lambda p: p in written)
    return written
