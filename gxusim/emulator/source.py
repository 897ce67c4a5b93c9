"""Kernel source: the text, Python function and AST of a Triton kernel or helper, the
mapping of its lines to file lines for messages, and the hash that keys caches on it."""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import textwrap
from typing import Any, Callable

from triton.runtime.jit import JITFunction

from .. import python_ast
from .ir import Unsupported


def kernel_source(fn: Any) -> tuple[str, Callable, str]:
    """(source from `def`, the Python function, kernel name) of a JITFunction or plain function."""
    if isinstance(fn, JITFunction):
        pyfn = fn.fn
        src = getattr(fn, "src", None) or inspect.getsource(pyfn)
    elif hasattr(fn, "fn") and isinstance(fn.fn, JITFunction):  # CachingAutotuner / Autotuner
        return kernel_source(fn.fn)
    elif inspect.isfunction(fn):
        pyfn, src = fn, inspect.getsource(fn)
    else:
        raise TypeError(f"not a Triton kernel: {fn!r}")
    return _from_def(src), pyfn, pyfn.__name__


@functools.lru_cache(maxsize=1024)
def _from_def(src: str) -> str:
    """The source dedented, from its `def` (every launch asks: cached by the text)."""
    src = textwrap.dedent(src)
    return src[src.find("def "):]


class KernelFunction:
    """One function being interpreted: its AST, globals and line mapping for messages."""

    def __init__(self, jit: Any):
        self.src, self.pyfn, self.name = kernel_source(jit)
        self.tree = python_ast.parse(self.src).body[0]
        if not isinstance(self.tree, ast.FunctionDef):
            raise Unsupported(f"{self.name} is not a function definition")
        self.globals = self.pyfn.__globals__
        self.lines = self.src.splitlines()
        try:
            file_lines, first = inspect.getsourcelines(self.pyfn)
            offset = next(i for i, text in enumerate(file_lines) if text.lstrip().startswith("def "))
            self.file_first = first + offset
        except (OSError, TypeError, StopIteration):
            self.file_first = None

    def where(self, lineno: int) -> str:
        text = self.lines[lineno - 1].strip() if 0 < lineno <= len(self.lines) else ""
        line = f"line {self.file_first + lineno - 1}" if self.file_first else f"kernel line {lineno}"
        return f"{self.name} {line}: `{text}`"


def declared_mutations(pyfn: Callable) -> frozenset[str]:
    """Arguments the kernel's decorators say it updates in place: Inductor's heuristics
    decorator carries `inductor_meta={'mutated_arg_names': [...]}` (buffers filled before
    the kernel runs). Empty for a kernel without one, or whose file cannot be read."""
    try:
        tree = python_ast.parse(textwrap.dedent(inspect.getsource(pyfn))).body[0]
    except (OSError, TypeError):
        return frozenset()
    for decorator in getattr(tree, "decorator_list", ()):
        for keyword in getattr(decorator, "keywords", ()):
            if keyword.arg == "inductor_meta" and isinstance(keyword.value, ast.Dict):
                for key, value in zip(keyword.value.keys, keyword.value.values):
                    if isinstance(key, ast.Constant) and key.value == "mutated_arg_names":
                        return frozenset(ast.literal_eval(value))
    return frozenset()


def source_hash(texts: list) -> str:
    """Short hash of source texts (a cache key part)."""
    return _hash("\0".join(texts))


@functools.lru_cache(maxsize=1024)
def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
