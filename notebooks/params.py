"""A notebook's parameters: the literals of its `parameters` cell, which of them only the runner
may set, and the type check of a `-p NAME VALUE` against the literal it replaces.

papermill itself infers a -p value's type from YAML and never compares it with the default, so
`-p smoke notabool` arrives as the truthy string 'notabool'; this module refuses it instead.
"""
from __future__ import annotations

import ast

import yaml

# Set by notebooks.run itself, never from the command line: measured_since says kernel.gpu_run
# ran in this invocation (a page may claim "measured anew" only then), record_path is where the
# notebook leaves its index record.
RUNNER_ONLY = {
    "measured_since": "set by the runner only, after kernel.gpu_run ran in the same invocation "
                      "(`--measure auto` on a CUDA machine)",
    "record_path": "set by the runner only: where the notebook writes its index record",
}


class ParameterError(ValueError):
    """A parameter cell or a passed value is unusable; str() names the notebook and the value."""


def literal_defaults(source: str, notebook: str) -> dict:
    """{name: default} of a parameters cell that holds only `name = literal` lines.

    papermill never recomputes derived values there, so `b = a * 2` would silently keep its
    default when `a` is passed: refuse it.
    """
    defaults = {}
    for node in ast.parse(source).body:
        target = getattr(node, "targets", [getattr(node, "target", None)])
        ok = (isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
              and all(isinstance(t, ast.Name) for t in target))
        value = None
        if ok:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                ok = False
        if not ok:
            raise ParameterError(f"{notebook}: parameters cell line {node.lineno} is not "
                                 f"`name = literal`: {ast.unparse(node)!r}")
        for t in target:
            defaults[t.id] = value
    return defaults


def _kind(v) -> str:
    return {bool: "a bool (true or false)", int: "an integer", float: "a number",
            str: "a string", list: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)


def coerce(notebook: str, name: str, raw: str, default):
    """The value of `-p name raw` for a parameter whose literal default is `default`.

    Strings stay as typed (a URL or a path is never YAML-parsed into a number); every other
    type must parse (YAML) into the default's type, ints being accepted where a float is.
    """
    if isinstance(default, str):
        return raw
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif default is None:
        ok = True
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ParameterError(f"{notebook}: -p {name} {raw!r}: expected {_kind(default)}, like "
                             f"the notebook's default {name} = {default!r}")
    return value


def check(notebook: str, raw: dict[str, str], defaults: dict, declared: set[str]) -> dict:
    """Typed values for the passed raw -p strings; refuses unknown and runner-only names.

    declared: the names papermill itself can see in the cell (it skips a line whose comment
    holds '=', which would make that parameter silently unsettable).
    """
    unseen = sorted(set(defaults) - declared)
    if unseen:
        raise ParameterError(f"{notebook}: papermill cannot parse the parameters line(s) of "
                             f"{', '.join(map(repr, unseen))}: it skips a line whose comment "
                             "holds '='")
    reserved = sorted(set(raw) & set(RUNNER_ONLY))
    if reserved:
        raise ParameterError("; ".join(f"-p {n}: {RUNNER_ONLY[n]}" for n in reserved))
    unknown = sorted(set(raw) - set(defaults))
    if unknown:
        settable = sorted(set(defaults) - set(RUNNER_ONLY))
        raise ParameterError(f"{notebook}: unknown parameter(s) {', '.join(map(repr, unknown))}; "
                             f"the notebook declares: {', '.join(settable)}")
    return {n: coerce(notebook, n, v, defaults[n]) for n, v in raw.items()}
