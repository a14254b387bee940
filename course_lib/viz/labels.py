"""How nodes are written in pictures: ``v4 = v2 × v3``, ``v̄(2→4) = v̄4 × v3``."""

from __future__ import annotations

from ..graph import Node

PRETTY = {"*": "×", "-": "−", "@": "@", "+": "+", "/": "/"}


def is_inline_constant(node: Node) -> bool:
    """Scalar constants are written into their users' labels instead of being drawn."""
    return node.is_constant and node.shape == ()


def reference(node: Node, names: dict) -> str:
    """How a node is referred to inside another node's label."""
    return names.get(node, node.name)


def expression(node: Node, names: dict) -> str:
    """The right-hand side of a node's definition, in terms of its inputs' names."""
    op, args = node.op, [reference(i, names) for i in node.inputs]
    if node.is_variable:
        return node.name
    if hasattr(op, "formula"):  # a fused node shows the expression it computes
        return f"fused: {op.formula(args, PRETTY)}"
    if op.name == "sum_n":
        return " + ".join(args)
    if op.name == "ones_like" and len(args) == 1:
        return "1"
    if op.symbol is not None and len(args) == 2:
        return f"{args[0]} {PRETTY.get(op.symbol, op.symbol)} {args[1]}"
    if op.symbol is not None and len(args) == 1:
        return f"{PRETTY.get(op.symbol, op.symbol)}{args[0]}"
    if op.name == "switch":
        return f"switch({', '.join(args)}) → {'true' if op.attrs['branch'] else 'false'}"
    if op.name == "getitem" and len(args) == 1:
        return f"{args[0]}{op.label()}"
    if op.name == "pow" and len(args) == 1:
        p = op.attrs["p"]
        return f"{args[0]}²" if p == 2 else f"{args[0]}^{p:g}"
    settings = [f"{k}={v}" for k, v in op.attrs.items() if v is not None and v is not False]
    name = "ln" if op.name == "log" else op.name
    return f"{name}({', '.join(args + settings)})"


def definition(node: Node, names: dict) -> str:
    """``name = expression`` (or just the name when they coincide)."""
    name, expr = reference(node, names), expression(node, names)
    return name if name == expr else f"{name} = {expr}"
