"""Arm specs (docs/contracts.md, Arm specs): parse, resolve aliases, enforce required/requires, canonical text.

Grammar: a patch selection, then env assignments, separated by spaces::

    all | none | all-minus A[,B] | only A[,B] | none-plus A[,B]   [VAR=value | VAR= ...]

``VAR=`` unsets VAR in the trial. Values with spaces are shell-quoted (``X='a b'``).

A secret value (a secret-looking name such as ``HF_TOKEN``, or a value that looks like a token)
appears in the canonical text as a keyed hash, ``HF_TOKEN=<redacted:3f2a1b9c>`` (see
:mod:`bisect_lab.redact`): the spec is the arm's identity in the database and in every output, and
the value itself lives only in ``Arm.env``, which is what the benchmark gets.
"""
from __future__ import annotations

import re
import shlex

from .errors import UsageError
from .model import Arm, PatchSet
from .patchset import closure, resolve_name
from .redact import is_tag, needs_tag, tag, untag

_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SELECTORS = ("all", "none", "all-minus", "only", "none-plus")


def _names(ps: PatchSet | None, text: str, selector: str) -> set[str]:
    labels = [t for t in text.split(",") if t]
    if not labels:
        raise UsageError(f"{selector!r} needs a comma-separated list of patch names")
    if ps is None:
        raise UsageError(f"{selector} {text}: this experiment has no patch set")
    return {resolve_name(ps, label) for label in labels}


def parse_env(tokens: list[str]) -> tuple[tuple[str, str | None], ...]:
    env: dict[str, str | None] = {}
    for tok in tokens:
        var, eq, value = tok.partition("=")
        if not eq or not _VAR_RE.match(var):
            raise UsageError(f"bad env assignment {tok!r}: expected VAR=value or VAR= (to unset)")
        if var in env:
            raise UsageError(f"env var {var} is given twice in one arm")
        if is_tag(value):
            # A spec copied from the results: the tag stands for a value this process may know.
            real = untag(value)
            if real is None:
                raise UsageError(f"{var}={value} is a redacted value: give the real one (bisect-lab stores "
                                 f"secrets only as a keyed hash)")
            value = real
        env[var] = value if value != "" else None
    return tuple(sorted(env.items()))


def parse_arm(spec: str, ps: PatchSet | None) -> Arm:
    """Parse an arm spec against a patch set; the result carries the canonical spec."""
    try:
        tokens = shlex.split(spec)
    except ValueError as e:
        raise UsageError(f"bad arm spec {spec!r}: {e}") from None
    if not tokens:
        raise UsageError("empty arm spec; expected all, none, all-minus X, only X or none-plus X")
    sel = tokens[0]
    rest = tokens[1:]
    optional = {p.name for p in ps.patches if not p.required} if ps else set()
    required = set(ps.required) if ps else set()
    if sel in ("all-minus", "only", "none-plus"):
        if not rest or "=" in rest[0]:
            raise UsageError(f"{sel!r} needs a comma-separated list of patch names, e.g. '{sel} topk,mla'")
        picked = _names(ps, rest[0], sel)
        rest = rest[1:]
        if sel == "all-minus":
            bad_required = sorted(picked & required)
            if bad_required:
                raise UsageError(f"cannot remove required patch {', '.join(bad_required)}: required patches are always applied")
            selected = optional - picked
            # Removing a patch that a kept patch needs would silently re-add it: refuse.
            for name in sorted(selected):
                needs = closure(ps, [name]) & picked
                if needs:
                    raise UsageError(f"cannot remove {', '.join(sorted(needs))}: {name} requires it (remove {name} too)")
        else:
            selected = picked
    elif sel == "all":
        selected = set(optional)
    elif sel == "none":
        selected = set()
    else:
        raise UsageError(f"bad arm spec {spec!r}: it must start with one of {', '.join(SELECTORS)}")
    patches = closure(ps, selected | required) if ps else frozenset()
    env = parse_env(rest)
    return make_arm(patches, env, ps)


def canonical(patches: frozenset[str], env, ps: PatchSet | None) -> str:
    """Stable text identity: the shorter of ``only``/``all-minus`` (names sorted), env sorted."""
    if ps is None:
        sel = "none"
    else:
        optional = sorted(p.name for p in ps.patches if not p.required)
        chosen = sorted(n for n in optional if n in patches)
        missing = sorted(n for n in optional if n not in patches)
        if not missing:
            sel = "all"
        elif not chosen:
            sel = "none"
        elif len(missing) <= len(chosen):
            sel = "all-minus " + ",".join(missing)
        else:
            sel = "only " + ",".join(chosen)
    parts = [sel]
    for var, value in sorted(env):
        # A secret's tag is the identity: two tokens stay two arms, and no sink ever sees the value.
        shown = tag(var, value) if needs_tag(var, value) else shlex.quote(value) if value else ""
        parts.append(f"{var}={shown}")
    return " ".join(parts)


def make_arm(patches, env, ps: PatchSet | None) -> Arm:
    patches = frozenset(patches)
    env = tuple(sorted(env))
    return Arm(spec=canonical(patches, env, ps), patches=patches, env=env)


def canonical_spec(spec: str, ps: PatchSet | None) -> str:
    return parse_arm(spec, ps).spec


# --------------------------------------------------------------------------- factors
def factors_between(good: Arm, bad: Arm) -> list[str]:
    """Factors of an attribution (docs/contracts.md, Arm specs): patches that differ, then ``env:VAR`` whose values differ."""
    patch_factors = sorted(good.patches ^ bad.patches)
    g, b = good.env_dict, bad.env_dict
    env_factors = sorted(f"env:{v}" for v in set(g) | set(b)
                         if (v in g) != (v in b) or g.get(v) != b.get(v))
    return patch_factors + env_factors


def arm_for_active(good: Arm, bad: Arm, active: frozenset[str], ps: PatchSet | None) -> Arm:
    """The arm in which exactly the factors in ``active`` take their value from ``bad``."""
    patches = set(good.patches)
    env = dict(good.env)
    bad_env = bad.env_dict
    for f in active:
        if f.startswith("env:"):
            var = f[4:]
            if var in bad_env:
                env[var] = bad_env[var]
            else:
                env.pop(var, None)        # bad leaves it to the environment: so does this arm
        elif f in bad.patches:
            patches.add(f)
        else:
            patches.discard(f)
    if ps is not None:
        patches = set(closure(ps, patches | set(ps.required)))
    return make_arm(patches, env.items(), ps)
