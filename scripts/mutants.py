"""Planted bugs: single-point mutants of the library, each run against the tests mapped to its file.

A *mutant* is the library with one small change a person could plausibly make by mistake: a comparison
flipped at its boundary, ``+`` for ``-``, a constant off by one, a condition negated, a check or a clamp
dropped, an early return. A test suite that notices every such change (*kills* the mutant) pins the
behaviour the code documents. A mutant that no test notices (a *survivor*) is either a missing test or
*equivalent*: a change that no input can observe (those are recorded once, with the reason, and left out
of the score).

How it runs
-----------
1. ``scripts/mutants.toml`` maps each source file to the test files (or test ids) that exercise it.
2. Every mutant of a file is generated from its syntax tree (Python's ``ast``), deterministically, in
   source order; ``--max-per-file N`` samples N of them with ``--seed``.
3. The repository (tracked and untracked, non-ignored files: the working tree as it is) is copied once per
   worker into a scratch folder. The real worktree is never written to.
4. The mapped tests run once unmutated (the baseline: they must pass, and their time sets the per-mutant
   timeout). Then, for each mutant: its file is patched in the worker's copy, the mapped tests run with
   ``pytest -x -q -p no:cacheprovider`` (the project's own options: no slow tests), and the file is
   restored. A failing run kills the mutant; a passing one lets it survive; a run past the timeout
   (``--timeout-factor`` times the baseline, 3 by default, and at least ``--min-timeout``, 60 s) is
   *timed out*: its whole process group is killed. Timed-out mutants count as detected in the score.
5. Mutants listed in ``scripts/mutants_equivalent.toml`` (keyed by file, line and mutation text, each
   with its reason) are not run and are left out of the score.

Mutation operators (``--operators`` selects some of them):

==========  ======================================================================================
compare     ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``, ``is`` ↔ ``is not``, ``in`` ↔ ``not in``
arith       ``+`` ↔ ``-``, ``*`` ↔ ``/``, ``//`` → ``*`` (also in ``+=``-style assignments)
constant    a number ``c`` → ``c + 1``, ``0``, ``-c``
negate      the condition of ``if`` / ``while`` / ``x if c else y`` / a comprehension negated;
            ``not x`` → ``x``; ``-x`` → ``x``
boolop      ``and`` ↔ ``or``
minmax      ``min`` ↔ ``max`` (``minimum``/``maximum``, ``amin``/``amax``, ``clamp_min``/``clamp_max``)
unwrap      ``x.clamp(...)``, ``torch.clamp(x, ...)``, ``abs(x)``, ``x.clone()``, ``round(x)``... → ``x``
where       ``torch.where(c, a, b)`` → ``a``, → ``b``
remove      a statement that is a call (a check, an in-place update), a ``raise``, a ``x += y``
            → ``pass``
return      ``return`` inserted before the first statement of a function that returns no value
==========  ======================================================================================

Not mutated: docstrings, annotations, ``__all__``, decorators, f-strings, the arguments of ``raise``
and of ``warnings.warn``, ``assert`` statements (type narrowing), ``if TYPE_CHECKING`` and
``if __name__ == "__main__"`` blocks, and statements on a line marked ``# pragma: no cover`` or
``# pragma: no mutate`` (with the block they open).

Usage
-----
::

    python scripts/mutants.py --max-per-file 25 --seed 0           # every mapped file, 25 mutants each
    python scripts/mutants.py --files target.py --list              # the mutants of matching files
    python scripts/mutants.py --files noise.py --show-survivors     # the survivors' diffs
    python scripts/mutants.py --only imle_solvers/noise.py:120:15#1 # one mutant, by its id
    python scripts/mutants.py --json /tmp/mutants.json              # every outcome, machine-readable
    python scripts/mutants.py --mark-equivalent imle_solvers/noise.py:120:15#1 "why no input sees it"

``--jobs`` (at most 2, the default) runs that many mutants side by side, each in its own copy. The
exit status is 0 when every non-equivalent mutant run was detected, 1 when some survived, 2 on a usage
error or a failing baseline.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import difflib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MAP_FILE = ROOT / "scripts" / "mutants.toml"
EQUIVALENTS_FILE = ROOT / "scripts" / "mutants_equivalent.toml"
MAX_JOBS = 2
OPERATORS = (
    "compare",
    "arith",
    "constant",
    "negate",
    "boolop",
    "minmax",
    "unwrap",
    "where",
    "remove",
    "return",
)

_COMPARE = {
    ast.Lt: (ast.LtE, "<="),
    ast.LtE: (ast.Lt, "<"),
    ast.Gt: (ast.GtE, ">="),
    ast.GtE: (ast.Gt, ">"),
    ast.Eq: (ast.NotEq, "!="),
    ast.NotEq: (ast.Eq, "=="),
    ast.Is: (ast.IsNot, "is not"),
    ast.IsNot: (ast.Is, "is"),
    ast.In: (ast.NotIn, "not in"),
    ast.NotIn: (ast.In, "in"),
}
_ARITH = {ast.Add: "-", ast.Sub: "+", ast.Mult: "/", ast.Div: "*", ast.FloorDiv: "*"}
_MINMAX = {
    "min": "max",
    "max": "min",
    "minimum": "maximum",
    "maximum": "minimum",
    "amin": "amax",
    "amax": "amin",
    "clamp_min": "clamp_max",
    "clamp_max": "clamp_min",
    "clamp_min_": "clamp_max_",
    "clamp_max_": "clamp_min_",
    "fmin": "fmax",
    "fmax": "fmin",
}
_UNWRAP_METHODS = {
    "clamp",
    "clamp_",
    "clamp_min",
    "clamp_max",
    "clamp_min_",
    "clamp_max_",
    "clip",
    "clone",
    "abs",
    "round",
    "floor",
    "ceil",
    "nan_to_num",
    "contiguous",
}
_UNWRAP_FUNCTIONS = {"abs", "round", "clamp", "clip", "nan_to_num", "floor", "ceil"}
_SKIP_PRAGMA = re.compile(r"#\s*pragma:\s*no (cover|mutate)")


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One single-point change of ``file``: bytes ``[start, stop)`` of the source become ``text``."""

    file: str
    line: int
    col: int
    index: int  # among the mutants at (line, col), in generation order
    operator: str
    start: int
    stop: int
    text: str
    description: str  # "`before` → `after`": with (file, line) the key of a recorded equivalent

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}:{self.col}#{self.index}"

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.text.encode() + source[self.stop :]


@dataclasses.dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed | survived | timeout | equivalent | error
    seconds: float = 0.0
    detail: str = ""
    reason: str = ""  # of a recorded equivalent


# --- generating mutants --------------------------------------------------------------------------------


class _Source:
    """A file's bytes with the byte offset of every line (``ast`` columns are UTF-8 byte offsets)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = [0]
        for line in data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.lines = data.decode("utf-8").splitlines()

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def text(self, node: ast.AST) -> str:
        start, stop = self.span(node)
        return self.data[start:stop].decode("utf-8")

    def skipped_line(self, line: int) -> bool:
        return bool(_SKIP_PRAGMA.search(self.lines[line - 1]))


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _operator_span(data: bytes, start: int, stop: int) -> tuple[int, int]:
    """The operator between two operands: the bytes of ``data[start:stop]`` that are not white space,
    parentheses, line continuations or comments."""
    first = last = -1
    i = start
    while i < stop:
        ch = data[i : i + 1]
        if ch == b"#":
            while i < stop and data[i : i + 1] != b"\n":
                i += 1
            continue
        if ch not in (b" ", b"\t", b"\n", b"\r", b"\\", b"(", b")"):
            if first < 0:
                first = i
            last = i + 1
        i += 1
    if first < 0:
        raise ValueError("no operator found")
    return first, last


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _dotted(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_dotted(func.value)}.{func.attr}"
    return ""


def _returns_value(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``fn`` (not its nested functions) returns a value or yields."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            return True
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _constant_values(value: int | float) -> list[int | float]:
    out: list[int | float] = [value + 1] if value + 1 != value else []  # 1e300 + 1 is 1e300
    if value != 0:
        out += [0 if isinstance(value, int) else 0.0, -value]
    return out


def _number(value: int | float) -> str:
    text = repr(value)
    return f"({text})" if text.startswith("-") else text


class _Generator:
    """Walks one module's tree and collects its mutants (see the module docstring for the operators)."""

    def __init__(self, file: str, data: bytes, operators: Sequence[str]) -> None:
        self.file, self.src, self.operators = file, _Source(data), set(operators)
        self.found: list[Mutant] = []
        self._seen: dict[tuple[int, int], int] = {}

    # the mutants themselves

    def _add(
        self, node: ast.AST, operator: str, start: int, stop: int, text: str, before: str, after: str
    ) -> None:
        if operator not in self.operators:
            return
        line, col = node.lineno, node.col_offset  # type: ignore[attr-defined]
        key = (line, col)
        index = self._seen.get(key, 0)
        self._seen[key] = index + 1
        description = f"`{_short(before)}` → `{_short(after)}`"
        self.found.append(Mutant(self.file, line, col, index, operator, start, stop, text, description))

    def _replace(self, node: ast.AST, operator: str, text: str) -> None:
        """``node``'s whole span becomes ``text``."""
        start, stop = self.src.span(node)
        self._add(node, operator, start, stop, text, self.src.text(node), text)

    def _replace_operator(
        self, node: ast.AST, left: ast.AST, right: ast.AST, operator: str, new: str
    ) -> None:
        """The operator between ``left`` and ``right`` (children of ``node``) becomes ``new``."""
        gap_start, gap_stop = self.src.span(left)[1], self.src.span(right)[0]
        start, stop = _operator_span(self.src.data, gap_start, gap_stop)
        node_start, node_stop = self.src.span(node)
        before = self.src.data[node_start:node_stop].decode("utf-8")
        after = (self.src.data[node_start:start] + new.encode() + self.src.data[stop:node_stop]).decode(
            "utf-8"
        )
        self._add(node, operator, start, stop, new, before, after)

    # the walk

    def run(self, tree: ast.Module) -> list[Mutant]:
        self._body(tree.body)
        return self.found

    def _body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if _is_docstring(stmt):
                continue
            self._stmt(stmt)

    def _stmt(self, stmt: ast.stmt) -> None:
        if self.src.skipped_line(stmt.lineno):
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Pass, ast.Assert)):
            return
        if isinstance(stmt, ast.If) and self._skipped_block(stmt.test):
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == "__all__"
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        ):
            return
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(stmt)
            return
        if isinstance(stmt, ast.ClassDef):
            self._body(stmt.body)
            return
        # remove a statement
        if isinstance(stmt, ast.Raise) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            self._replace(stmt, "remove", "pass")
        if isinstance(stmt, ast.AugAssign):
            self._replace(stmt, "remove", "pass")
            new = _ARITH.get(type(stmt.op))
            if new is not None:
                self._replace_operator(stmt, stmt.target, stmt.value, "arith", new + "=")
        if isinstance(stmt, ast.Raise):
            return  # its message is not behaviour
        if isinstance(stmt, (ast.If, ast.While)):
            self._negate(stmt.test)
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self._expr(stmt.value)
            return
        for field, value in ast.iter_fields(stmt):
            if field in ("body", "orelse", "finalbody"):
                self._body(value)
            elif field == "handlers":
                for handler in value:
                    if not self.src.skipped_line(handler.lineno):
                        self._body(handler.body)
            elif field == "cases":
                for case in value:
                    if case.guard is not None:
                        self._expr(case.guard)
                    self._body(case.body)
            elif isinstance(value, ast.expr) and field != "type_comment":
                if isinstance(stmt, ast.AugAssign) and field == "target":
                    continue
                self._expr(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.expr):
                        self._expr(item)
                    elif isinstance(item, ast.withitem):
                        self._expr(item.context_expr)

    def _skipped_block(self, test: ast.expr) -> bool:
        text = ast.unparse(test)
        return text in ("TYPE_CHECKING", "typing.TYPE_CHECKING", "__name__ == '__main__'")

    def _function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for default in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
            self._expr(default)
        body = [s for s in fn.body if not _is_docstring(s)]
        if body and not _returns_value(fn) and body[0].lineno > fn.lineno:
            first = body[0]
            if not isinstance(first, (ast.Return, ast.Pass)) and not self.src.skipped_line(first.lineno):
                at = self.src.offset(first.lineno, first.col_offset)
                indent = " " * first.col_offset
                self._add(
                    first,
                    "return",
                    at,
                    at,
                    f"return\n{indent}",
                    f"def {fn.name}: …",
                    f"def {fn.name}: return",
                )
        self._body(fn.body)

    def _negate(self, test: ast.expr) -> None:
        text = self.src.text(test)
        self._replace(test, "negate", f"not ({text})")

    def _expr(self, node: ast.expr) -> None:
        if isinstance(node, ast.JoinedStr):
            return
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                new = _COMPARE.get(type(op))
                if new is not None:
                    self._replace_operator(node, operands[i], operands[i + 1], "compare", new[1])
        elif isinstance(node, ast.BinOp):
            new_op = _ARITH.get(type(node.op))
            strings = any(
                isinstance(side, ast.JoinedStr)
                or (isinstance(side, ast.Constant) and isinstance(side.value, str))
                for side in (node.left, node.right)
            )
            if new_op is not None and not strings:
                self._replace_operator(node, node.left, node.right, "arith", new_op)
        elif isinstance(node, ast.BoolOp):
            new_bool = "or" if isinstance(node.op, ast.And) else "and"
            for left, right in zip(node.values, node.values[1:]):
                self._replace_operator(node, left, right, "boolop", new_bool)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            if not (isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)):
                self._replace(node, "negate", f"({self.src.text(node.operand)})")
        elif isinstance(node, ast.IfExp):
            self._negate(node.test)
        elif isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                for new_value in _constant_values(value):
                    self._replace(node, "constant", _number(new_value))
        elif isinstance(node, ast.Call):
            if self._call(node):
                return
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                for cond in gen.ifs:
                    self._negate(cond)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._expr(child)
            elif isinstance(child, ast.comprehension):
                for part in (child.iter, *child.ifs):
                    self._expr(part)
            elif isinstance(child, ast.keyword) and child.arg != "stacklevel":
                self._expr(child.value)

    def _call(self, node: ast.Call) -> bool:
        """Mutants of a call; True when its arguments are not to be mutated (``warnings.warn``)."""
        name, dotted = _call_name(node.func), _dotted(node.func)
        if dotted in ("warnings.warn", "warn"):
            return True
        if name in _MINMAX:
            start, stop = self.src.span(node.func)
            start = stop - len(name.encode())
            before = self.src.text(node.func)
            self._add(
                node, "minmax", start, stop, _MINMAX[name], before, before[: -len(name)] + _MINMAX[name]
            )
        if (
            isinstance(node.func, ast.Attribute)
            and name in _UNWRAP_METHODS
            and not (
                isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("torch", "np", "math", "numpy")
            )
        ):
            self._replace(node, "unwrap", f"({self.src.text(node.func.value)})")
        elif (
            name in _UNWRAP_FUNCTIONS
            and node.args
            and (isinstance(node.func, ast.Name) or dotted.startswith(("torch.", "np.", "numpy.")))
        ):
            self._replace(node, "unwrap", f"({self.src.text(node.args[0])})")
        if dotted == "torch.where" and len(node.args) == 3:
            for branch in node.args[1:]:
                self._replace(node, "where", f"({self.src.text(branch)})")
        return False


def generate(file: str, data: bytes, operators: Sequence[str] = OPERATORS) -> list[Mutant]:
    """Every mutant of one source file, in source order (each changes the code: see `compiles` for the
    check that it still compiles, made on the mutants that are run)."""
    tree = ast.parse(data, filename=file)
    return sorted(_Generator(file, data, operators).run(tree), key=lambda m: (m.line, m.col, m.index))


def compiles(mutant: Mutant, data: bytes) -> bool:
    """Whether the mutated source still compiles (every operator is meant to keep it valid)."""
    try:
        compile(mutant.apply(data), mutant.file, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def sample(mutants: list[Mutant], limit: int | None, seed: int, file: str) -> list[Mutant]:
    """``limit`` of ``mutants``, in source order (all of them when ``limit`` is None).

    Drawn so that every operator gets its share and a number with its three variants weighs as much as
    one comparison: the sites (where a mutant changes the code) of each operator are shuffled, the
    operators take turns giving one mutant of their next site, and once every site has given one the
    remaining variants follow in a shuffled order. The generator is seeded with ``seed`` and the file's
    name: the same draw on every machine, whatever Python's hash seed.
    """
    if limit is None or len(mutants) <= limit:
        return list(mutants)
    rng = random.Random(f"{seed}:{file}")
    sites: dict[tuple[str, int, int], list[int]] = {}
    for i, mutant in enumerate(mutants):
        sites.setdefault((mutant.operator, mutant.line, mutant.col), []).append(i)
    queues: dict[str, list[int]] = {}
    rest: list[int] = []
    for (operator, _, _), variants in sites.items():
        rng.shuffle(variants)
        queues.setdefault(operator, []).append(variants[0])
        rest += variants[1:]
    for queue in queues.values():
        rng.shuffle(queue)
    rng.shuffle(rest)
    chosen: list[int] = []
    while len(chosen) < limit and any(queues.values()):
        for operator in OPERATORS:
            if queues.get(operator) and len(chosen) < limit:
                chosen.append(queues[operator].pop())
    chosen += rest[: limit - len(chosen)]
    return [mutants[i] for i in sorted(chosen)]


# --- configuration -------------------------------------------------------------------------------------


def load_map(path: Path) -> dict[str, list[str]]:
    """``{source file: [test paths]}`` from the ``[map]`` table of ``path``."""
    table = tomllib.loads(path.read_text(encoding="utf-8")).get("map", {})
    out: dict[str, list[str]] = {}
    for source, tests in table.items():
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise SystemExit(f"{path}: {source} must map to a non-empty list of test paths")
        out[source] = tests
    return out


@dataclasses.dataclass(frozen=True)
class Equivalent:
    file: str
    line: int
    mutation: str
    reason: str


def load_equivalents(path: Path) -> list[Equivalent]:
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("equivalent", [])
    out = []
    for entry in entries:
        if not entry.get("reason"):
            raise SystemExit(f"{path}: every equivalent needs a reason: {entry}")
        out.append(Equivalent(entry["file"], int(entry["line"]), entry["mutation"], entry["reason"]))
    return out


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def record_equivalent(path: Path, mutant: Mutant, reason: str) -> None:
    entry = (
        "\n[[equivalent]]\n"
        f"file = {_toml_string(mutant.file)}\n"
        f"line = {mutant.line}\n"
        f"mutation = {_toml_string(mutant.description)}\n"
        f"reason = {_toml_string(reason)}\n"
    )
    with path.open("a", encoding="utf-8") as handle:
        handle.write(entry)


# --- running -------------------------------------------------------------------------------------------


def repository_files(root: Path) -> list[str]:
    """The working tree as git sees it: tracked and untracked files that are not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name and (root / name).is_file()})


def scratch_copy(root: Path, into: Path) -> Path:
    """Copy the working tree of ``root`` into the new folder ``into`` (never inside ``root``)."""
    if into.resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"refusing a scratch copy inside the repository: {into}")
    for name in repository_files(root):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    return into


def run_tests(copy: Path, tests: Sequence[str], timeout: float) -> tuple[str, float, str]:
    """``(status, seconds, last lines)`` of the mapped tests in ``copy``: passed, failed, timeout, error."""
    env = {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",  # a patched file of the same size and second is never stale
        "PYTHONPATH": str(copy),
    }
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    child = subprocess.Popen(
        cmd, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # pytest and whatever it started
        child.communicate()
        return "timeout", time.monotonic() - start, ""
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
    seconds = time.monotonic() - start
    tail = "\n".join(out.decode(errors="replace").strip().splitlines()[-3:])
    status = {0: "passed", 1: "failed", 2: "failed"}.get(child.returncode, "error")
    return status, seconds, tail


class Workers:
    """``jobs`` scratch copies of the repository, each used by one mutant at a time."""

    def __init__(self, root: Path, jobs: int) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="imle-mutants-"))
        self.free: list[Path] = [scratch_copy(root, self.base / f"copy{i}") for i in range(jobs)]
        self.lock = threading.Condition()

    @contextlib.contextmanager
    def copy(self) -> Iterator[Path]:
        with self.lock:
            while not self.free:
                self.lock.wait()
            copy = self.free.pop()
        try:
            yield copy
        finally:
            with self.lock:
                self.free.append(copy)
                self.lock.notify()

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def run_mutant(
    workers: Workers, mutant: Mutant, original: bytes, tests: Sequence[str], timeout: float
) -> Outcome:
    with workers.copy() as copy:
        path = copy / mutant.file
        path.write_bytes(mutant.apply(original))
        try:
            status, seconds, tail = run_tests(copy, tests, timeout)
        finally:
            path.write_bytes(original)
    named = {"failed": "killed", "passed": "survived", "timeout": "timeout", "error": "error"}[status]
    return Outcome(mutant, named, seconds, tail if named == "error" else "")


def diff(mutant: Mutant, original: bytes) -> str:
    before = original.decode("utf-8").splitlines(keepends=True)
    after = mutant.apply(original).decode("utf-8").splitlines(keepends=True)
    lines = difflib.unified_diff(before, after, f"a/{mutant.file}", f"b/{mutant.file}", n=1)
    return "".join(lines)


# --- the command ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python scripts/mutants.py",
        description="Plant single-point bugs in the mapped source files and run their tests.",
    )
    parser.add_argument("--map", type=Path, default=MAP_FILE, help="source → tests table (TOML, [map])")
    parser.add_argument("--equivalents", type=Path, default=EQUIVALENTS_FILE, help="recorded equivalents")
    parser.add_argument(
        "--files", nargs="+", default=None, help="only mapped files whose path contains one of these"
    )
    parser.add_argument("--only", nargs="+", default=None, metavar="ID", help="only these mutant ids")
    parser.add_argument("--operators", nargs="+", choices=OPERATORS, default=list(OPERATORS))
    parser.add_argument("--max-per-file", type=int, default=None, help="sample this many mutants per file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    parser.add_argument("--jobs", type=int, default=MAX_JOBS, help=f"mutants run side by side (1-{MAX_JOBS})")
    parser.add_argument(
        "--timeout-factor", type=float, default=3.0, help="per-mutant timeout: this many times the baseline"
    )
    parser.add_argument("--min-timeout", type=float, default=60.0, help="per-mutant timeout at least (s)")
    parser.add_argument("--list", action="store_true", help="list the mutants; run nothing")
    parser.add_argument("--show-survivors", action="store_true", help="print each survivor's diff")
    parser.add_argument("--run-equivalents", action="store_true", help="run recorded equivalents too")
    parser.add_argument("--json", type=Path, default=None, help="write every outcome to this file")
    parser.add_argument(
        "--mark-equivalent",
        nargs=2,
        metavar=("ID", "REASON"),
        default=None,
        help="record mutant ID as equivalent, with the reason no input can tell it apart; run nothing",
    )
    return parser


def _select(args: argparse.Namespace, mapping: dict[str, list[str]]) -> dict[str, list[Mutant]]:
    chosen: dict[str, list[Mutant]] = {}
    for file in mapping:
        if args.files and not any(part in file for part in args.files):
            continue
        path = ROOT / file
        if not path.is_file():
            raise SystemExit(f"{args.map}: no such source file {file}")
        data = path.read_bytes()
        every = generate(file, data, args.operators)
        if args.only:
            picked = [m for m in every if m.id in args.only]
        else:
            picked = sample(every, args.max_per_file, args.seed, file)
        chosen[file] = []
        for mutant in picked:
            if compiles(mutant, data):
                chosen[file].append(mutant)
            else:  # a flaw of this script: say so, and leave it out of the score
                print(
                    f"warning: {mutant.id} {mutant.description} does not compile; left out", file=sys.stderr
                )
    return {file: mutants for file, mutants in chosen.items() if mutants}


def _equivalent_reason(mutant: Mutant, equivalents: Sequence[Equivalent]) -> str | None:
    for entry in equivalents:
        if (entry.file, entry.line, entry.mutation) == (mutant.file, mutant.line, mutant.description):
            return entry.reason
    return None


def _stale(
    equivalents: Sequence[Equivalent], files: Sequence[str], operators: Sequence[str]
) -> list[Equivalent]:
    """Recorded equivalents of ``files`` that match no mutant any more (the code moved or changed)."""
    keys = set()
    for file in files:
        keys |= {
            (m.file, m.line, m.description) for m in generate(file, (ROOT / file).read_bytes(), operators)
        }
    return [e for e in equivalents if e.file in files and (e.file, e.line, e.mutation) not in keys]


def _score(outcomes: Sequence[Outcome]) -> tuple[int, int]:
    detected = sum(o.status in ("killed", "timeout") for o in outcomes)
    counted = sum(o.status in ("killed", "timeout", "survived") for o in outcomes)
    return detected, counted


def _report(
    outcomes: Sequence[Outcome], files: Sequence[str], show: bool, originals: dict[str, bytes]
) -> None:
    print(f"\n{'file':52} {'run':>4} {'killed':>6} {'t/o':>4} {'surv':>4} {'equiv':>5} {'err':>4}  score")
    for file in files:
        mine = [o for o in outcomes if o.mutant.file == file]
        counts = {
            s: sum(o.status == s for o in mine)
            for s in ("killed", "timeout", "survived", "equivalent", "error")
        }
        detected, counted = _score(mine)
        score = f"{100 * detected / counted:5.1f} %" if counted else "    -"
        print(
            f"{file:52} {len(mine):4} {counts['killed']:6} {counts['timeout']:4} {counts['survived']:4} "
            f"{counts['equivalent']:5} {counts['error']:4}  {score}"
        )
    detected, counted = _score(outcomes)
    if counted:
        share = 100 * detected / counted
        print(f"\nscore: {detected} / {counted} non-equivalent mutants detected ({share:.1f} %)")
    for o in outcomes:
        if o.status in ("survived", "error"):
            print(f"{o.status}: {o.mutant.id} [{o.mutant.operator}] {o.mutant.description}")
            if o.detail:
                print("    " + o.detail.replace("\n", "\n    "))
            if show and o.status == "survived":
                print(diff(o.mutant, originals[o.mutant.file]))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= args.jobs <= MAX_JOBS:
        print(f"--jobs must be between 1 and {MAX_JOBS}, got {args.jobs}", file=sys.stderr)
        return 2
    mapping = load_map(args.map)
    if args.mark_equivalent:
        ident, reason = args.mark_equivalent
        file = ident.split(":", 1)[0]
        found = [m for m in generate(file, (ROOT / file).read_bytes(), OPERATORS) if m.id == ident]
        if not found:
            print(f"no mutant {ident}", file=sys.stderr)
            return 2
        record_equivalent(args.equivalents, found[0], reason)
        print(f"recorded {ident} {found[0].description} in {args.equivalents}")
        return 0
    selected = _select(args, mapping)
    if args.list:
        for mutants in selected.values():
            for mutant in mutants:
                print(f"{mutant.id} [{mutant.operator}] {mutant.description}")
        print(f"{sum(map(len, selected.values()))} mutants in {len(selected)} files")
        return 0
    equivalents = load_equivalents(args.equivalents)
    for entry in _stale(equivalents, list(selected), args.operators):
        print(f"warning: recorded equivalent matches no mutant: {entry.file}:{entry.line} {entry.mutation}")
    originals = {file: (ROOT / file).read_bytes() for file in selected}
    outcomes: list[Outcome] = []
    to_run: list[tuple[Mutant, list[str]]] = []
    for file, mutants in selected.items():
        for mutant in mutants:
            reason = _equivalent_reason(mutant, equivalents)
            if reason is not None and not args.run_equivalents:
                outcomes.append(Outcome(mutant, "equivalent", reason=reason))
            else:
                to_run.append((mutant, mapping[file]))
    total = len(to_run)
    print(f"{total} mutants to run in {len(selected)} files ({len(outcomes)} recorded equivalents skipped)")
    workers = Workers(ROOT, args.jobs)
    try:
        timeouts: dict[str, float] = {}
        failed: list[str] = []
        with ThreadPoolExecutor(args.jobs) as pool:

            def baseline(file: str) -> tuple[str, str, float, str]:
                with workers.copy() as copy:
                    status, seconds, tail = run_tests(copy, mapping[file], 1800)
                return file, status, seconds, tail

            for file, status, seconds, tail in pool.map(baseline, list(selected)):
                if status != "passed":  # its mutants are not run: nothing could tell them apart
                    print(f"baseline of {file} did not pass ({status}), skipped:\n{tail}", file=sys.stderr)
                    failed.append(file)
                    continue
                timeouts[file] = max(args.min_timeout, args.timeout_factor * seconds)
                print(f"baseline {file}: {seconds:.1f} s, timeout {timeouts[file]:.0f} s")
            to_run = [(m, tests) for m, tests in to_run if m.file not in failed]
            total = len(to_run)
            done = 0
            futures = [
                pool.submit(run_mutant, workers, m, originals[m.file], tests, timeouts[m.file])
                for m, tests in to_run
            ]
            for future in futures:
                outcome = future.result()
                done += 1
                reason = _equivalent_reason(outcome.mutant, equivalents)
                if reason is not None and outcome.status == "killed":
                    print(f"recorded as equivalent but killed (drop the entry): {outcome.mutant.id}")
                elif reason is not None and outcome.status == "survived":
                    outcome = dataclasses.replace(outcome, status="equivalent", reason=reason)
                outcomes.append(outcome)
                print(
                    f"[{done}/{total}] {outcome.status:8} {outcome.seconds:5.1f} s  {outcome.mutant.id} "
                    f"{outcome.mutant.description}",
                    flush=True,
                )
    finally:
        workers.close()
    outcomes = [o for o in outcomes if o.mutant.file not in failed]
    outcomes.sort(
        key=lambda o: (list(selected).index(o.mutant.file), o.mutant.line, o.mutant.col, o.mutant.index)
    )
    _report(outcomes, [f for f in selected if f not in failed], args.show_survivors, originals)
    if args.json is not None:
        records = [
            {
                **dataclasses.asdict(o.mutant),
                "id": o.mutant.id,
                "status": o.status,
                "seconds": round(o.seconds, 2),
                "reason": o.reason,
                "detail": o.detail,
            }
            for o in outcomes
        ]
        args.json.write_text(json.dumps(records, indent=1, ensure_ascii=False), encoding="utf-8")
    if failed:
        print(f"\nnot run (failing baseline): {', '.join(failed)}")
        return 2
    return 0 if all(o.status != "survived" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
