"""Mutation operators: one-line edits of the kind a torch_npu commit makes, as AST rewrites.

A mutant is named by where it applies (module, line, column), the operator and,
where one place admits several edits, a variant. :func:`generate` lists every
mutant of the named functions of one module's source; :func:`mutate` rebuilds
that source's tree with exactly one of them applied, so a mutant crosses
processes as its id alone and each process applies it itself, at import.

The operators (each as small as a reviewer would miss):

- ``delete-statement``: a statement becomes ``pass``;
- ``negate-condition``: the test of an ``if``/``while``/ternary becomes ``not (...)``;
- ``drop-condition``: an ``if`` loses its guard (``if True:``), or one operand of its
  ``and``/``or`` goes;
- ``negate-comparison``: ``==``/``!=``, ``is``/``is not``, ``in``/``not in`` swap;
- ``call-to-noop``: a call whose value is kept (assigned, returned) becomes ``None``;
- ``remove-return``: ``return X`` becomes ``return None``; an early bare ``return`` goes;
- ``change-constant``: ``True``/``False`` swap, a number moves by one, a string changes;
- ``drop-decorator``: ``@run_once``, ``@functools.lru_cache(None)``, ``@staticmethod``... go;
- ``swap-statements``: two neighbouring statements of a set-up sequence change places;
- ``swap-steps``: two neighbouring entries of a literal table of steps change places;
- ``record-before-work``: a statement that records state (an assignment to, or ``del`` of, an attribute, an
  item or a ``global``/``nonlocal`` name; a container's ``add``/``append``/``remove``...; an ``if`` doing only
  that) moves ahead of an earlier
  statement of its block that does work (a call, an import, a block holding one): variant ``up-N``, ahead of
  line N; or that work moves after the record: variant ``down-N``, after line N. The refactor "set the
  state, then do the work": after the work fails, the state says it was done. A move that would read a name
  before the statement that binds it, and the neighbour swaps ``swap-statements`` already makes, are left out.

Docstrings, logging, warnings and the text of raised errors are not mutated:
an edit there changes only what a person reads.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Literal, Union

from .statements import (TEXT_CALLS, binds, call_name, does_work, is_text_for_people, own_statements, reads,
                         records_state)

#: the pseudo-function naming a module's top-level statements (what runs at import)
MODULE_LEVEL = "<module>"

#: every operator, as the record's table of operators says it (the module docstring says more)
OPERATORS = {
    "delete-statement": "a statement becomes `pass`",
    "negate-condition": "the test of an `if`/`while`/ternary becomes `not (...)`",
    "drop-condition": "an `if` loses its guard (`if True:`), or one operand of its `and`/`or`",
    "negate-comparison": "`==`/`!=`, `is`/`is not`, `in`/`not in` swap",
    "call-to-noop": "a call whose value is kept becomes `None`",
    "remove-return": "`return X` becomes `return None`; an early bare `return` goes",
    "change-constant": "`True`/`False` swap, a number moves by one, a string changes",
    "drop-decorator": "a decorator (`@run_once`, `@lru_cache`...) goes",
    "swap-statements": "two neighbouring statements of a set-up sequence change places",
    "swap-steps": "two neighbouring entries of a literal table of steps change places",
    "record-before-work": "a statement recording state (attribute, item, global; a container's add or remove) "
                          "moves ahead of earlier work of its block (`up-N`), or that work moves after it "
                          "(`down-N`): the state says done before the work succeeded",
}


@dataclass(frozen=True)
class Mutant:
    """One edit of one module: what a report row shows and what a process needs to apply it."""

    id: str  #: ``<module>:<line>:<col>:<operator>[:<variant>]``, stable for one source
    module: str
    function: str  #: the innermost function's qualified name, or ``<module>``
    target: str  #: the configured target function the edit lies in (coverage is taken per target)
    line: int
    operator: str
    description: str  #: the edit, as a reviewer would read it: ``if x:`` -> ``if not (x):``
    col: int = 0  #: the column the id names

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Mutant":
        if "col" not in data:  # a record written before the column was kept: its id names it
            column = data["id"].split(":")[2]
            data = {**data, "col": int(column) if column.isdigit() else 0}
        return cls(**data)


@dataclass(frozen=True)
class _Site:
    """Where an edit applies: a node found by walking the tree in a fixed order, and how to edit it."""

    node_path: tuple  # (field, index) steps from the module to the node
    operator: str
    variant: str
    line: int
    col: int
    function: str
    target: str
    description: str
    edit: Callable[[ast.AST], ast.AST | None] | Literal["swap-with-next"] | tuple  # the node -> its replacement (None: leave as is); "swap-with-next"; ("move", from, to)


def _src(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 70 else text[:67] + "..."


#: a function or a class: what a target names
_Definition = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]


def _definitions(body: list, descend: Callable[[str], bool] = lambda qualname: True, path: tuple = (),
                 prefix: str = "") -> Iterator[tuple[str, _Definition, tuple]]:
    """The functions and classes of a module's ``body`` and, in each class ``descend`` accepts, of the class's
    body, as ``(qualified name, node, path from the module)``: ``f``, ``Class``, ``Class.method``, in source
    order, a class before its members. Functions' own nested definitions are not among them: a target is named
    as the configuration names it, a module-level function or class or a class's member.

    The one place that says what a target name means: the walker that lists mutants, the coverage pass's
    instrumentation and the check for names that name nothing must agree on it, or a mutant's function would
    be covered under another name than it is reported under.
    """
    for index, stmt in enumerate(body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name, here = prefix + stmt.name, path + (("body", index),)
            yield name, stmt, here
            if isinstance(stmt, ast.ClassDef) and descend(name):
                yield from _definitions(stmt.body, descend, here, name + ".")


def _targets(body: list, targets: set[str]) -> Iterator[tuple[str, _Definition, tuple]]:
    """The definitions :func:`_definitions` finds that ``targets`` names; a named class is one target, whole
    (its members are not looked at for names of their own)."""
    for name, stmt, path in _definitions(body, lambda qualname: qualname not in targets):
        if name in targets:
            yield name, stmt, path


def _is_docstring(stmt: ast.stmt, body: list, index: int) -> bool:
    return index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


class _Walker:
    """Walks target functions in source order, noting every site an operator applies to."""

    def __init__(self, module: str, targets: set[str]):
        self.module = module
        self.targets = targets
        self.sites: list[_Site] = []
        #: the names each function declares ``global`` or ``nonlocal``: assigning one records state
        self._declared: dict[str, set[str]] = {}

    # -- walking -----------------------------------------------------------
    def walk_module(self, tree: ast.Module) -> None:
        if MODULE_LEVEL in self.targets:
            self._body(tree.body, ("body",), (), MODULE_LEVEL, MODULE_LEVEL, top_level=True)
        for name, stmt, path in _targets(tree.body, self.targets):
            self._definition(stmt, path, name, name)

    def _definition(self, node: _Definition, path: tuple, qualname: str, target: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._declared[qualname] = {name for stmt in own_statements(node) if isinstance(stmt, (ast.Global,
                                        ast.Nonlocal)) for name in stmt.names}
            for index, decorator in enumerate(node.decorator_list):
                self._add(path, "drop-decorator", str(index), decorator, qualname, target,
                          f"@{_src(decorator)} removed from {node.name}", _drop_decorator(index))
            self._body(node.body, ("body",), path, qualname, target)
        else:  # a class: its methods and nested classes, each named Class.method
            for index, stmt in enumerate(node.body):
                here = path + (("body", index),)
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self._definition(stmt, here, f"{qualname}.{stmt.name}", target)
                elif not _is_docstring(stmt, node.body, index):
                    self._statement(stmt, node.body, index, here, qualname, target)

    def _body(self, body: list, field: tuple, path: tuple, function: str, target: str, top_level=False) -> None:
        for index, stmt in enumerate(body):
            here = path + ((field[0], index),)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not top_level:
                    self._definition(stmt, here, f"{function}.<locals>.{stmt.name}", target)
                continue
            if _is_docstring(stmt, body, index):
                continue
            if top_level and isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue  # an import the module needs fails at once: nothing to learn
            self._statement(stmt, body, index, here, function, target)
        # swap-statements: neighbouring set-up steps (calls, assignments, imports)
        for index in range(len(body) - 1):
            first, second = body[index], body[index + 1]
            if _is_setup_step(first) and _is_setup_step(second) and ast.dump(first) != ast.dump(second) \
                    and (_is_call_statement(first) or _is_call_statement(second)):
                here = path + ((field[0], index),)
                self._add(here, "swap-statements", "", first, function, target,
                          f"{_src(first)} <-> {_src(second)}", None, swap_with_next=True)
        self._records_before_work(body, field, path, function, target)

    def _records_before_work(self, body: list, field: tuple, path: tuple, function: str, target: str) -> None:
        """record-before-work: each recording statement moved ahead of each earlier working statement of the
        block, and each such work moved after the record, where no name is then read before it is bound."""
        declared = self._declared.get(function, set())
        for index, record in enumerate(body):
            if not records_state(record, declared):
                continue
            for earlier in range(index - 1, -1, -1):
                work = body[earlier]
                if not does_work(work) or records_state(work, declared):
                    continue
                between = body[earlier:index]
                if not reads(record) & binds(between):  # the record, moved up, reads nothing bound on the way
                    if not (earlier == index - 1 and _swapped_already(work, record)):
                        self._add(path + ((field[0], index),), "record-before-work", f"up-{work.lineno}", record,
                                  function, target, f"{_first_line(record)} moved ahead of {_first_line(work)}",
                                  ("move", index, earlier))
                after = body[earlier + 1:index + 1]
                if earlier < index - 1 and not reads(*after) & binds([work]):
                    self._add(path + ((field[0], earlier),), "record-before-work", f"down-{record.lineno}", work,
                              function, target, f"{_first_line(work)} moved after {_first_line(record)}",
                              ("move", earlier, index))

    def _statement(self, stmt: ast.stmt, body: list, index: int, path: tuple, function: str, target: str) -> None:
        if isinstance(stmt, (ast.Pass, ast.Global, ast.Nonlocal)) or is_text_for_people(stmt):
            return
        if isinstance(stmt, ast.Return):
            if stmt.value is not None and not (isinstance(stmt.value, ast.Constant) and stmt.value.value is None):
                self._add(path, "remove-return", "", stmt, function, target,
                          f"{_src(stmt)} -> return None", lambda node: ast.Return(value=ast.Constant(None)))
            elif index < len(body) - 1 or len(body) > 1:
                self._add(path, "remove-return", "", stmt, function, target, "early `return` removed", _to_pass)
            if stmt.value is not None:
                self._expressions(stmt.value, path + (("value", None),), function, target)
            return
        if not isinstance(stmt, ast.Raise):
            self._add(path, "delete-statement", "", stmt, function, target, f"{_first_line(stmt)} deleted", _to_pass)
        if isinstance(stmt, (ast.If, ast.While)):
            self._condition(stmt, path, function, target)
            self._body(stmt.body, ("body",), path, function, target)
            self._body(stmt.orelse, ("orelse",), path, function, target)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self._expressions(stmt.iter, path + (("iter", None),), function, target)
            self._body(stmt.body, ("body",), path, function, target)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self._body(stmt.body, ("body",), path, function, target)
        elif isinstance(stmt, ast.Try):
            self._body(stmt.body, ("body",), path, function, target)
            for h_index, handler in enumerate(stmt.handlers):
                self._body(handler.body, ("body",), path + (("handlers", h_index),), function, target)
            self._body(stmt.orelse, ("orelse",), path, function, target)
            self._body(stmt.finalbody, ("finalbody",), path, function, target)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
            if isinstance(stmt.value, ast.Call) and call_name(stmt.value) not in TEXT_CALLS:
                self._add(path + (("value", None),), "call-to-noop", "", stmt.value, function, target,
                          f"{_src(stmt.value)} -> None", lambda node: ast.Constant(None))
            self._expressions(stmt.value, path + (("value", None),), function, target)
        elif isinstance(stmt, ast.Expr):
            self._expressions(stmt.value, path + (("value", None),), function, target)
        elif isinstance(stmt, ast.Assert):
            self._expressions(stmt.test, path + (("test", None),), function, target)

    def _condition(self, stmt: ast.If | ast.While, path: tuple, function: str, target: str) -> None:
        test = stmt.test
        test_path = path + (("test", None),)
        kind = "if" if isinstance(stmt, ast.If) else "while"
        self._add(test_path, "negate-condition", "", test, function, target,
                  f"{kind} {_src(test)}: -> {kind} not ({_src(test)}):", _negate)
        if isinstance(stmt, ast.If):
            # the guard dropped: the branch always runs (never running it is what deleting the `if` does)
            self._add(test_path, "drop-condition", "true", test, function, target,
                      f"if {_src(test)}: -> if True:", lambda node: ast.Constant(True))
        if isinstance(test, ast.BoolOp) and len(test.values) > 1:
            for index, operand in enumerate(test.values):
                self._add(test_path, "drop-condition", f"operand{index}", test, function, target,
                          f"operand `{_src(operand)}` dropped from `{_src(test)}`", _drop_operand(index))
        self._expressions(test, test_path, function, target, top_is_condition=True)

    def _expressions(self, expr: ast.AST, path: tuple, function: str, target: str, top_is_condition=False) -> None:
        """Comparisons, constants and ternaries inside one expression, in a fixed walk order."""
        for sub_path, node in _walk_expression(expr, path):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_SWAP:
                self._add(sub_path, "negate-comparison", "", node, function, target,
                          f"{_src(node)} -> {_src(_swap_compare(node))}", _swap_compare)
            elif isinstance(node, ast.IfExp):
                self._add(sub_path + (("test", None),), "negate-condition", "", node.test, function, target,
                          f"{_src(node.test)} -> not ({_src(node.test)}) in a ternary", _negate)
            elif isinstance(node, ast.Constant) and not isinstance(node.value, bytes):
                changed = _changed_constant(node.value)
                if changed is not _UNCHANGED:
                    self._add(sub_path, "change-constant", "", node, function, target,
                              f"{node.value!r} -> {changed!r}", lambda n, c=changed: ast.Constant(c))
            elif isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) > 1 \
                    and all(isinstance(e, ast.Tuple) for e in node.elts):
                for index in range(len(node.elts) - 1):
                    self._add(sub_path, "swap-steps", str(index), node, function, target,
                              f"{_src(node.elts[index])} <-> {_src(node.elts[index + 1])}", _swap_elements(index))

    # -- recording -----------------------------------------------------------
    def _add(self, path, operator, variant, node, function, target, description, edit, swap_with_next=False):
        if swap_with_next:
            edit = "swap-with-next"
        self.sites.append(_Site(tuple(path), operator, variant, node.lineno, node.col_offset, function, target,
                                description, edit))


_COMPARE_SWAP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
                 ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Lt: ast.GtE, ast.GtE: ast.Lt,
                 ast.Gt: ast.LtE, ast.LtE: ast.Gt}
_UNCHANGED = object()


def _walk_expression(expr: ast.AST, path: tuple) -> Iterator[tuple[tuple, ast.AST]]:
    """Nodes of one expression with their paths, skipping text for people and lambdas' bodies."""
    yield path, expr
    if isinstance(expr, ast.JoinedStr):
        return
    if isinstance(expr, ast.Call) and call_name(expr) in TEXT_CALLS:
        return
    for field, value in ast.iter_fields(expr):
        if isinstance(value, ast.AST) and not isinstance(value, (ast.expr_context, ast.operator, ast.cmpop,
                                                                   ast.boolop, ast.unaryop)):
            yield from _walk_expression(value, path + ((field, None),))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, ast.AST) and not isinstance(item, (ast.cmpop, ast.keyword)):
                    yield from _walk_expression(item, path + ((field, index),))
                elif isinstance(item, ast.keyword) and not isinstance(item.value, ast.Constant):
                    # a keyword's constant is a setting passed on (name=, default=): left alone
                    yield from _walk_expression(item.value, path + ((field, index), ("value", None)))


def _changed_constant(value):
    if value is True or value is False:
        return not value
    if value is None or value is Ellipsis:
        return _UNCHANGED
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.0
    if isinstance(value, str):
        return value + "_mutated" if value else "mutated"
    return _UNCHANGED


def _first_line(stmt: ast.stmt) -> str:
    text = ast.unparse(stmt).splitlines()[0]
    return "`" + (text if len(text) <= 70 else text[:67] + "...") + "`"


def _is_call_statement(stmt: ast.stmt) -> bool:
    """A call made for its effect or its value (``f()``, ``x = f()``): a step of a set-up sequence."""
    return isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call)


def _is_setup_step(stmt: ast.stmt) -> bool:
    return (_is_call_statement(stmt) and not is_text_for_people(stmt)) or isinstance(
        stmt, (ast.Assign, ast.AugAssign, ast.Import, ast.ImportFrom))


def _swapped_already(first: ast.stmt, second: ast.stmt) -> bool:
    """Whether swap-statements makes this neighbour swap (the same edit under its own name)."""
    return _is_setup_step(first) and _is_setup_step(second) and (_is_call_statement(first) or _is_call_statement(second))


def _to_pass(node: ast.AST) -> ast.AST:
    return ast.Pass()


def _negate(node: ast.expr) -> ast.expr:
    return ast.UnaryOp(op=ast.Not(), operand=node)


def _swap_compare(node: ast.Compare) -> ast.Compare:
    return ast.Compare(left=node.left, ops=[_COMPARE_SWAP[type(node.ops[0])]()], comparators=node.comparators)


def _drop_operand(index: int) -> Callable:
    def edit(node: ast.BoolOp) -> ast.expr:
        values = [v for i, v in enumerate(node.values) if i != index]
        return values[0] if len(values) == 1 else ast.BoolOp(op=node.op, values=values)
    return edit


def _drop_decorator(index: int) -> Callable:
    def edit(node: ast.FunctionDef) -> ast.FunctionDef:
        node.decorator_list = [d for i, d in enumerate(node.decorator_list) if i != index]
        return node
    return edit


def _swap_elements(index: int) -> Callable:
    def edit(node):
        elts = list(node.elts)
        elts[index], elts[index + 1] = elts[index + 1], elts[index]
        return type(node)(elts=elts, ctx=node.ctx)
    return edit


def _sites(tree: ast.Module, module: str, targets: set[str]) -> list[_Site]:
    walker = _Walker(module, targets)
    walker.walk_module(tree)
    return walker.sites


def _mutant_id(module: str, site: _Site) -> str:
    ident = f"{module}:{site.line}:{site.col}:{site.operator}"
    return ident + (f":{site.variant}" if site.variant else "")


def unknown_targets(source: str, targets: set[str]) -> set[str]:
    """Target names that name no function, class or method of the source (a typo in the configuration)."""
    found = {MODULE_LEVEL} | {name for name, _, _ in _definitions(ast.parse(source).body)}
    return set(targets) - found


def _catalogue(source: str, module: str, targets: set[str]) -> list[tuple[Mutant, _Site]]:
    tree = ast.parse(source)
    catalogue, seen = [], set()
    for site in _sites(tree, module, targets):
        base = _mutant_id(module, site)
        ident, k = base, 1
        while ident in seen:  # two edits at one place (rare): number them
            k += 1
            ident = f"{base}#{k}"
        seen.add(ident)
        catalogue.append((Mutant(ident, module, site.function, site.target, site.line, site.operator,
                                 site.description, site.col), site))
    return catalogue


def generate(source: str, module: str, targets: set[str]) -> list[Mutant]:
    """Every mutant of ``targets`` (function, class or ``Class.method`` names, or ``<module>``) in ``source``."""
    return [mutant for mutant, _ in _catalogue(source, module, targets)]


def mutate(source: str, module: str, targets: set[str], mutant_id: str) -> ast.Module:
    """The source's tree with the one named mutant applied; KeyError when the id names none."""
    for mutant, site in _catalogue(source, module, targets):
        if mutant.id == mutant_id:
            return _applied(source, site)
    raise KeyError(mutant_id)


def _applied(source: str, site: _Site) -> ast.Module:
    tree = ast.parse(source)  # a fresh tree: the site's path leads to the same node in it
    _apply(tree, site)
    return ast.fix_missing_locations(tree)


def compilable(source: str, module: str, targets: set[str], wanted=None) -> list[Mutant]:
    """The mutants of :func:`generate` (those ``wanted(mutant)`` accepts) that compile: Python itself
    rejects the others (a ``nonlocal`` whose binding was deleted), so no test could run them."""
    kept = []
    for mutant, site in _catalogue(source, module, targets):
        if wanted is not None and not wanted(mutant):
            continue
        try:
            compile(_applied(source, site), module, "exec", dont_inherit=True)
        except SyntaxError:
            continue
        kept.append(mutant)
    return kept


def _apply(tree: ast.Module, site: _Site) -> None:
    parent, field, index = _resolve(tree, site.node_path)
    if site.edit == "swap-with-next":
        body = getattr(parent, field)
        body[index], body[index + 1] = body[index + 1], body[index]
        return
    if isinstance(site.edit, tuple):  # ("move", from, to): a statement of this block moved to another place
        _, source, destination = site.edit
        body = getattr(parent, field)
        body.insert(destination, body.pop(source))
        return
    node = getattr(parent, field)[index] if index is not None else getattr(parent, field)
    replacement = site.edit(node)
    if isinstance(replacement, ast.AST):
        ast.copy_location(replacement, node)
        if index is None:
            setattr(parent, field, replacement)
        else:
            getattr(parent, field)[index] = replacement


def _resolve(tree: ast.Module, path: tuple):
    """The parent node, field and index of the node at ``path``."""
    node: ast.AST = tree
    for field, index in path[:-1]:
        node = getattr(node, field) if index is None else getattr(node, field)[index]
    field, index = path[-1]
    return node, field, index


HIT_FUNCTION = "__npu_lazy_mutate_hit__"


def instrument(source: str, module: str, targets: set[str]) -> ast.Module:
    """The source's tree with a hit call first in every target function (nested ones too) and at the top.

    The coverage pass runs this version: each function says it ran, under the
    same qualified name a mutant's ``function`` carries.
    """
    tree = ast.parse(source)

    def hit(name: str) -> ast.stmt:
        return ast.Expr(ast.Call(ast.Name(HIT_FUNCTION, ast.Load()), [ast.Constant(name)], []))

    def visit(node, qualname: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = 1 if node.body and _is_docstring(node.body[0], node.body, 0) else 0
            node.body.insert(first, hit(f"{module}:{qualname}"))
            inner = qualname + ".<locals>."
        else:  # a class body runs once, where the class is defined: its statements' mutants need that hit
            first = 1 if node.body and _is_docstring(node.body[0], node.body, 0) else 0
            node.body.insert(first, hit(f"{module}:{qualname}"))
            inner = qualname + "."
        for stmt in _nested_definitions(node):
            visit(stmt, inner + stmt.name)

    for name, stmt, _ in list(_targets(tree.body, targets)):  # listed first: visit() edits the bodies
        visit(stmt, name)
    position = 0
    while position < len(tree.body) and (_is_docstring(tree.body[position], tree.body, position) or (
            isinstance(statement := tree.body[position], ast.ImportFrom) and statement.module == "__future__")):
        position += 1
    tree.body[position:position] = [
        ast.ImportFrom("pytest_npu_lazy.mutate.trace", [ast.alias("hit", HIT_FUNCTION)], 0), hit(f"{module}:{MODULE_LEVEL}")]
    return ast.fix_missing_locations(tree)


def _nested_definitions(node: ast.AST) -> Iterator[_Definition]:
    """Functions and classes defined in a node's body, however deep in its blocks, but not inside them."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop(0)
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
        elif isinstance(child, ast.stmt) or isinstance(child, ast.excepthandler):
            stack.extend(ast.iter_child_nodes(child))


__all__ = ["HIT_FUNCTION", "MODULE_LEVEL", "Mutant", "compilable", "generate", "instrument", "mutate", "unknown_targets"]
