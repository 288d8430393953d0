"""Experiment matrices: patch selections x env values -> arm specs with readable ids (layer 3).

Used by the pytest plugin (``pytest.mark.parametrize``) and by sweep files (``[matrix]``)::

    from bisect_lab.matrix import expand, params
    expand(["topk", "mla"], env={"NCCL_PROTO": ["LL", "Simple"]})
    # -> [Case('all NCCL_PROTO=LL', id='all-NCCL_PROTO=LL'), Case('all NCCL_PROTO=Simple', ...),
    #     Case('all-minus topk NCCL_PROTO=LL', id='all-minus-topk-NCCL_PROTO=LL'), ...]

    @pytest.mark.parametrize("arm", params("experiments/demo.toml", patches=["all", "all-minus mla"]))
    def test_arm(bisect_lab, arm): ...

Nothing heavy is imported here: pytest loads this module while collecting.
"""
from __future__ import annotations

import itertools
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .errors import UsageError
from .model import Experiment, PatchSet

__all__ = ["Case", "expand", "params", "case_id"]

_SELECTORS = ("all", "none", "all-minus", "only", "none-plus")


@dataclass(frozen=True)
class Case:
    """One cell of a matrix: an arm spec (docs/contracts.md, Arm specs) and a test id made from it."""

    spec: str
    id: str

    def __str__(self) -> str:
        return self.spec

    def param(self, *marks):
        """This case as a ``pytest.param`` (value = the arm spec, id = :attr:`id`)."""
        import pytest
        return pytest.param(self.spec, id=self.id, marks=marks)


def case_id(spec: str) -> str:
    """A test id from an arm spec: ``all-minus topk,mla NCCL_PROTO=LL`` -> ``all-minus-topk+mla-NCCL_PROTO=LL``.

    Spaces become ``-`` and commas ``+`` (pytest ids keep both readable in ``-k`` expressions);
    an unset variable reads ``VAR=unset``.
    """
    try:
        tokens = shlex.split(spec)
    except ValueError:
        tokens = spec.split()
    out = []
    for tok in tokens:
        if "=" in tok and not tok.startswith(("all", "none", "only")):
            var, _, value = tok.partition("=")
            if value.startswith("<redacted"):      # a secret's tag, in -k friendly characters
                value = value.strip("<>").replace(":", "-")
            tok = f"{var}={value if value else 'unset'}"
        out.append(tok.replace(",", "+").replace(" ", "_"))
    return "-".join(out)


def _patchset_of(source) -> tuple[PatchSet | None, list[str]]:
    """(patch set or None, optional patch names) of an experiment, a TOML path, or a list of names."""
    if source is None:
        return None, []
    if isinstance(source, Experiment):
        ps = source.patchset
    elif isinstance(source, (str, os.PathLike)) and str(source).endswith(".toml"):
        from .config import load_experiment
        ps = load_experiment(Path(source)).patchset
    elif isinstance(source, PatchSet):
        ps = source
    elif isinstance(source, Iterable) and not isinstance(source, (str, bytes)):
        return None, [str(n) for n in source]
    else:
        raise UsageError(f"matrix source {source!r}: expected an Experiment, an experiment .toml path, "
                         f"a PatchSet or a list of patch names")
    if ps is None:
        return None, []
    return ps, [p.name for p in ps.patches if not p.required]


def _selection(item: str, names: Sequence[str]) -> str:
    """A patch-selection item: a full selector text, or a bare patch name meaning ``all-minus NAME``."""
    item = item.strip()
    head = item.split()[0] if item else ""
    if head in _SELECTORS:
        return item
    if names and item not in names:
        # Aliases resolve later (parse_arm) when a patch set is known; with a plain name list, refuse typos.
        raise UsageError(f"matrix: unknown patch {item!r}; expected one of {', '.join(names)} "
                         f"or a selection like 'all-minus {names[0]}'")
    return f"all-minus {item}"


def expand(source=None, *, patches: Sequence[str] | None = None,
           env: Mapping[str, Sequence[str | None]] | None = None,
           leave_one_out: bool | None = None) -> list[Case]:
    """Expand patch selections x env values into arm specs with readable ids.

    ``source``: an :class:`~bisect_lab.model.Experiment`, the path of an experiment TOML file, a
    :class:`~bisect_lab.model.PatchSet`, or a plain list of patch names (no validation of aliases then).
    ``patches``: selections such as ``"all"``, ``"none"``, ``"all-minus topk"``, ``"only mla,topk"``;
    a bare patch name ``"topk"`` means ``"all-minus topk"``. Default (or ``leave_one_out=True``):
    ``"all"`` plus ``"all-minus X"`` for every optional patch X of the source.
    ``env``: ``VAR -> [values]``; ``None`` or ``""`` means "unset" (``VAR=``). Every combination
    of values is crossed with every patch selection.

    With a patch set, specs are validated and canonicalised (unknown names raise
    :class:`~bisect_lab.errors.UsageError`); duplicates are dropped, order is kept.
    """
    ps, names = _patchset_of(source)
    sels: list[str] = []
    if patches is None or leave_one_out:
        sels += ["all"] + [f"all-minus {n}" for n in names]
    for item in patches or []:
        sels.append(_selection(str(item), names))
    if not sels:
        sels = ["all"]
    env = dict(env or {})
    env_axes = []
    for var in env:
        values = env[var]
        if isinstance(values, (str, bytes)) or values is None:
            values = [values]
        env_axes.append([(var, v) for v in values])
    cases: list[Case] = []
    seen: set[str] = set()
    for sel in sels:
        for combo in itertools.product(*env_axes) if env_axes else [()]:
            # A secret value is written as its tag (bisect_lab.redact) even without a patch set: the
            # spec becomes a test id, shown by pytest; the tag maps back to the value when it runs.
            parts = [sel] + [f"{var}={_shown(var, v)}" for var, v in combo]
            spec = " ".join(parts)
            if ps is not None:
                from .arms import parse_arm
                spec = parse_arm(spec, ps).spec
            if spec in seen:
                continue
            seen.add(spec)
            cases.append(Case(spec, case_id(spec)))
    return cases


def _shown(var: str, value) -> str:
    from .redact import needs_tag, tag
    if value in (None, ""):
        return ""
    return tag(var, str(value)) if needs_tag(var, str(value)) else shlex.quote(str(value))


def params(source=None, **kw) -> list:
    """:func:`expand`, as ``pytest.param`` objects for ``pytest.mark.parametrize("arm", ...)``."""
    return [c.param() for c in expand(source, **kw)]
