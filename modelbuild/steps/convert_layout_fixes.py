"""What TVM's ConvertLayout gets wrong, written another way before it runs (the
``prepare`` of blocked_layout.convert)."""

from __future__ import annotations

import functools

from .rewrite_pass import function_pass


def for_convert_layout(mod):
    """``mod`` with what TVM's ConvertLayout gets wrong written another way, for
    blocked_layout.convert:

    - a concat's negative axis as the positive one: ConvertLayout carried
      ``concat(axis=-3)`` of NCHW (the channels, as ONNX writes them) into NCHW{b}c as axis
      2 of the five, the rows: a library with other numbers, or none at all;
    - a split into one section (ONNX's Split with one output, which the importer types as
      the tensor itself) as its input: ConvertLayout ended the process with SIGSEGV on it
      after a convolution with blocks of its own (found by a differential run);
    - a split of the channels at given indices as one strided_slice per piece:
      ConvertLayout carried ``split(indices=[16], axis=1)`` into NCHW16c with its index
      still in channels, applied to the blocks (pieces of 256 and 32 channels for 16 and
      272: other numbers, exit 0; or a negative extent). A differential run found it."""
    return function_pass("ForConvertLayout", _for_convert_layout_class, lambda m: m)(mod)


@functools.cache
def _for_convert_layout_class():
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class ForConvertLayout(PyExprMutator):
        def visit_call_(self, call):
            call = self.builder_.normalize(super().visit_call_(call))
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if (call.op.name == "relax.concat"
                    and call.attrs.axis is not None and int(call.attrs.axis) < 0):
                axis = int(call.attrs.axis) + call.ty.ndim
                return self.builder_.normalize(relax.op.concat(call.args[0], axis=axis))
            if call.op.name == "relax.split" and _one_section(call.attrs.indices_or_sections):
                data = call.args[0]
                if isinstance(call.ty, relax.TensorType):
                    return data
                return self.builder_.normalize(relax.Tuple([data]))
            if call.op.name == "relax.split":
                return self._channel_split_as_slices(call)
            return call

        def _channel_split_as_slices(self, call):
            """A split of the channels at given indices as one strided_slice per piece."""
            data, attrs = call.args[0], call.attrs
            ndim = getattr(data.ty, "ndim", -1)
            sections = attrs.indices_or_sections
            if ndim != 4 or isinstance(sections, (int, tvm.tirx.IntImm)) \
                    or int(attrs.axis) % ndim != 1:
                return call
            try:
                cuts = [int(i) for i in sections]
                channels = int(data.ty.shape[1])
            except (TypeError, ValueError):
                return call  # a symbolic size: left to ConvertLayout as it is
            bounds = [0, *cuts, channels]
            pieces = [relax.op.strided_slice(data, axes=[1], begin=[a], end=[max(a, b)])
                      for a, b in zip(bounds, bounds[1:])]
            return self.builder_.normalize(relax.Tuple(pieces))

    return ForConvertLayout


def _one_section(sections) -> bool:
    """Whether a split's ``indices_or_sections`` is one section (the whole axis)."""
    try:
        return int(sections) == 1
    except (TypeError, ValueError):
        return len(sections) == 0  # no split indices: one piece
