"""The model's inputs get names that are C identifiers, each a name no other value of the
graph has.

TIR parameters are named after the model's inputs, and TVM's C codegen writes them into C
source verbatim ("gpu_0/data_0" does not compile). A new name must be free: "x:0" made
"x_0" where a node's output or a weight is already "x_0" would join two values into one
(a library that computes something else, or takes fewer arguments). Every use of a renamed
input is renamed with it: nodes of the graph and of its subgraphs (If, Loop, Scan
bodies), graph outputs (an input passed straight through) and value_info.
"""

from __future__ import annotations

import re

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def identifier_input_names(model, shapes: dict) -> dict:
    """Rename ``model``'s graph inputs, in place; returns ``shapes`` (input name -> shape)
    keyed by the new names."""
    graph = model.graph
    weights = {i.name for i in graph.initializer}
    taken = set(_names(graph))
    renames = {}
    for value in graph.input:
        if value.name in weights or not _NOT_IDENT.search(value.name):
            continue
        base = _NOT_IDENT.sub("_", value.name)
        new, n = base, 1
        while new in taken:
            new, n = f"{base}_{n}", n + 1
        taken.add(new)
        renames[value.name] = new
    if renames:
        _rename(graph, renames)
    return {renames.get(k, k): v for k, v in shapes.items()}


def _subgraphs(node):
    from onnx import AttributeProto

    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def _names(graph):
    """Every value name of ``graph`` and its subgraphs."""
    for group in (graph.input, graph.output, graph.value_info):
        yield from (v.name for v in group)
    yield from (i.name for i in graph.initializer)
    for node in graph.node:
        yield from node.input
        yield from node.output
        for sub in _subgraphs(node):
            yield from _names(sub)


def _rename(graph, renames: dict) -> None:
    for group in (graph.input, graph.output, graph.value_info):
        for value in group:
            value.name = renames.get(value.name, value.name)
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = renames.get(name, name)
        for sub in _subgraphs(node):
            _rename(sub, renames)
