"""commands: `python -m modelbuild`: cli parses arguments and dispatches; one module per
command (tune, import/export, sample/select, check, inspect, explain, watch, why, cache,
bench, sweep).

May import: every other layer.
"""
