"""The grammar of a fused kernel's expressions: what the fusion pass generates, nothing more.

An expression of a :class:`~.fused_template.FusedElementwise` is pasted into CUDA C source,
so it is read token by token before that: names defined before it (the inputs, earlier
temporaries), numbers (``2``, ``1.5f``, ``1e-3``), the operators
``+ - * / % < > <= >= == != && || !`` and ``?:``, parentheses, and calls to the math
functions of :data:`FUNCTIONS` with their number of arguments. Anything else (``;``, a
string, ``#``, a newline, another function or name) raises :class:`KernelCompileError`
naming the kernel, the expression and the token. The check is a loop with a stack of the
open parentheses, calls and ``?``, not a recursive parser: a deep expression is no problem.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from .errors import KernelCompileError

FUNCTIONS = {  # name: number of arguments
    # the ops' "cuda" expressions (course_lib/ops/elementwise.py); maximumf is NumPy's maximum,
    # defined by fused_elementwise.cu
    "expf": 1, "logf": 1, "sinf": 1, "cosf": 1, "tanhf": 1, "sqrtf": 1, "rsqrtf": 1,
    "powf": 2, "maximumf": 2,
    # CUDA's float maximum, minimum and absolute value (the lecture's examples use fmaxf)
    "fmaxf": 2, "fminf": 2, "fabsf": 1,
}  # fmt: skip
_TOKEN = re.compile(
    r"""(?P<space>[ \t]+)
      | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[fF]?(?![\w.]))
      | (?P<call>[A-Za-z_]\w*)[ \t]*\(
      | (?P<name>[A-Za-z_]\w*)
      | (?P<operator>&&|\|\||[<>=!]=|[-+*/%<>!?:(),])""",
    re.VERBOSE,
)
_INVALID = re.compile(r"\w[\w.]*|.", re.DOTALL)  # what to show of text that is no token
_UNARY = {"-", "+", "!"}
_BINARY = {"+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "!=", "&&", "||"}


@dataclass(frozen=True)
class _Token:
    kind: str  # number, call (a function's name and its "("), name, operator, invalid, end
    text: str
    position: int


class _Refused(Exception):
    """Why the expression is refused, and at which token."""

    def __init__(self, reason: str, token: _Token):
        super().__init__(reason)
        self.reason, self.token = reason, token


def _tokens(expression: str) -> list[_Token]:
    """The tokens of ``expression``, ending in an ``end`` token (or in the first ``invalid``
    text, followed by ``end``)."""
    tokens, position = [], 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            text = _INVALID.match(expression, position).group(0)
            tokens.append(_Token("invalid", text, position))
            break
        if match.lastgroup != "space":
            tokens.append(_Token(match.lastgroup, match.group(match.lastgroup), position))
        position = match.end()
    return tokens + [_Token("end", "", len(expression))]


@dataclass
class _Open:
    """A construct not closed yet: ``(``, a call (``name``, ``arguments`` so far), ``?`` or
    the ``:`` branch of a conditional."""

    kind: str
    name: str = ""
    arguments: int = 1

    def __str__(self) -> str:
        return f"'{self.name}('" if self.kind == "call" else repr(self.kind)


class _Checker:
    """Reads tokens in turn, alternating between wanting an operand and an operator."""

    def __init__(self, names: Collection[str]):
        self.names = names
        self.open: list[_Open] = []
        self.wants_operand = True

    def read(self, token: _Token) -> None:
        if token.kind == "invalid":
            raise _Refused("the grammar has no token", token)
        if self.wants_operand:
            self._operand(token)
        else:
            self._operator(token)

    def _operand(self, token: _Token) -> None:
        if token.text in _UNARY:
            return
        if token.kind == "call":
            self._call(token)
        elif token.text == "(":
            self.open.append(_Open("("))
        elif token.kind == "number":
            self.wants_operand = False
        elif token.kind == "name":
            self._name(token)
        else:
            raise _Refused("expected a name, a number, a call or '(', found", token)

    def _call(self, token: _Token) -> None:
        if token.text not in FUNCTIONS:
            raise _Refused("unknown function", token)
        self.open.append(_Open("call", token.text))

    def _name(self, token: _Token) -> None:
        if token.text in FUNCTIONS:
            raise _Refused("a function needs its arguments in parentheses:", token)
        if token.text not in self.names:
            known = ", ".join(self.names) or "none"
            raise _Refused(f"the names defined before it are {known}, not", token)
        self.wants_operand = False

    def _operator(self, token: _Token) -> None:
        if token.text in _BINARY:
            self.wants_operand = True
        elif token.text == "?":
            self.open.append(_Open("?"))
            self.wants_operand = True
        elif token.text == ":":
            self._innermost(("?",), token).kind = ":"
            self.wants_operand = True
        elif token.text == ",":
            self._innermost(("call",), token).arguments += 1
            self.wants_operand = True
        elif token.text == ")":
            self._close(self._innermost(("(", "call"), token), token)
        elif token.kind == "end":
            self._finish(token)
        else:
            raise _Refused("expected an operator, ')', ',' or the end, found", token)

    def _innermost(self, kinds: tuple[str, ...], token: _Token) -> _Open:
        """The innermost open construct, which must be one of ``kinds``, once the ``:``
        branches that ``token`` ends are closed."""
        while self.open and self.open[-1].kind == ":":
            self.open.pop()
        if not self.open or self.open[-1].kind not in kinds:
            found = str(self.open[-1]) if self.open else "nothing"
            wanted = " or ".join("call" if k == "call" else repr(k) for k in kinds)
            raise _Refused(f"no {wanted} is open (the innermost open is {found}) for", token)
        return self.open[-1]

    def _close(self, closed: _Open, token: _Token) -> None:
        self.open.pop()
        wanted = FUNCTIONS.get(closed.name, 1)
        if closed.arguments != wanted:
            raise _Refused(f"{closed.name} takes {wanted} argument{'s' * (wanted > 1)}, not "
                           f"{closed.arguments}, at", token)  # fmt: skip

    def _finish(self, token: _Token) -> None:
        while self.open and self.open[-1].kind == ":":
            self.open.pop()
        if self.open:
            raise _Refused(f"{self.open[-1]} is not closed at", token)


def check_expression(kernel: str, target: str, expression: str, names: Collection[str]) -> None:
    """Raise :class:`KernelCompileError` unless ``expression`` (the value of ``target`` in
    fused kernel ``kernel``) is in the grammar of the module docstring, over ``names``."""
    checker = _Checker(names)
    try:
        for token in _tokens(expression):
            checker.read(token)
    except _Refused as refused:
        token = refused.token
        shown = repr(token.text) if token.text else "the end"
        raise KernelCompileError(
            f"fused kernel {kernel!r}, the expression for {target!r}, {expression!r}: "
            f"{refused.reason} {shown} (character {token.position}). It must be one C "
            "expression of the fusion pass's grammar: names defined before it, numbers, "
            f"+ - * / % < > <= >= == != && || ! ?:, parentheses, and {', '.join(FUNCTIONS)}"
        ) from None
