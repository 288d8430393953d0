"""Patch sets: a folder of patch files plus ``patchset.toml`` (docs/contracts.md, Patch-set manifest)."""
from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

from .errors import ConfigError, UsageError
from .model import Patch, PatchSet

MANIFEST = "patchset.toml"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_KNOWN_KEYS = {"name", "aliases", "file", "description", "required", "requires"}


_HUNK_RE = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diff_stats(text: str) -> tuple[tuple[str, ...], int, int]:
    """Files a unified diff touches (b/ side, or a/ for deletions) and its +/- line counts.

    Lines are counted inside hunks only, by the lengths their ``@@`` headers give: what follows
    the last hunk (the ``-- `` signature and version of ``git format-patch``) is no deletion, and a
    deleted line that itself starts with ``--`` still is one."""
    files: list[str] = []
    added = removed = 0
    old = None
    left_old = left_new = 0              # lines the current hunk still holds on each side
    for line in text.splitlines():
        if left_old > 0 or left_new > 0:
            if line.startswith("+"):
                added += 1
                left_new -= 1
            elif line.startswith("-"):
                removed += 1
                left_old -= 1
            elif line.startswith("\\"):      # "\ No newline at end of file"
                pass
            else:                           # context (a blank line is an empty context line)
                left_old -= 1
                left_new -= 1
            continue
        m = _HUNK_RE.match(line)
        if m:
            left_old = int(m.group(1)) if m.group(1) is not None else 1
            left_new = int(m.group(2)) if m.group(2) is not None else 1
        elif line.startswith("diff --git "):
            m = re.match(r"diff --git a/(.+?) b/(.+)$", line)
            if m and m.group(2) not in files:
                files.append(m.group(2))
        elif line.startswith("--- "):
            old = line[4:].split("\t")[0].strip()
        elif line.startswith("+++ "):
            new = line[4:].split("\t")[0].strip()
            path = new if new != "/dev/null" else (old or "")
            path = re.sub(r"^[ab]/", "", path)
            if path and path != "/dev/null" and path not in files:
                files.append(path)
    return tuple(files), added, removed


def _as_str_list(value, path, key) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, key, f"expected a list of strings, got {value!r}")
    return tuple(value)


def load_patchset(folder: str | Path) -> PatchSet:
    """Read and validate a patch-set folder; every error names the manifest and the key."""
    root = Path(folder).resolve()
    manifest = root / MANIFEST
    if not root.is_dir():
        raise ConfigError(root, None, "patch-set folder does not exist")
    if not manifest.is_file():
        raise ConfigError(manifest, None, "missing patch-set manifest (patchset.toml)")
    try:
        data = tomllib.loads(manifest.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(manifest, None, f"malformed TOML: {e}") from None
    entries = data.get("patch", [])
    if not isinstance(entries, list):
        raise ConfigError(manifest, "patch", "expected an array of tables [[patch]]")
    patches: list[Patch] = []
    seen: dict[str, str] = {}          # name or alias -> owning patch
    for i, e in enumerate(entries):
        key = f"patch[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(manifest, key, "expected a table")
        unknown = set(e) - _KNOWN_KEYS
        if unknown:
            raise ConfigError(manifest, key, f"unknown keys {sorted(unknown)}; expected some of {sorted(_KNOWN_KEYS)}")
        name = e.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ConfigError(manifest, f"{key}.name", f"expected a name of [a-z0-9-], got {name!r}")
        key = f"patch.{name}"
        aliases = _as_str_list(e.get("aliases", []), manifest, f"{key}.aliases")
        for label in (name, *aliases):
            if label in seen:
                raise ConfigError(manifest, key, f"name or alias {label!r} is already used by patch {seen[label]!r}")
            if label in ("all", "none", "only", "all-minus", "none-plus"):
                raise ConfigError(manifest, key, f"{label!r} is a reserved word of arm specs")
            seen[label] = name
        file = e.get("file")
        if not isinstance(file, str):
            raise ConfigError(manifest, f"{key}.file", "expected the patch file name (string)")
        ppath = (root / file).resolve()
        if not ppath.is_file():
            raise ConfigError(manifest, f"{key}.file", f"patch file {file!r} does not exist in {root}")
        required = e.get("required", False)
        if not isinstance(required, bool):
            raise ConfigError(manifest, f"{key}.required", "expected true or false")
        description = e.get("description", "")
        if not isinstance(description, str):
            raise ConfigError(manifest, f"{key}.description", "expected a string")
        raw = ppath.read_bytes()
        files, added, removed = diff_stats(raw.decode("utf-8", "replace"))
        if not files:
            raise ConfigError(manifest, f"{key}.file", f"{file!r} is not a unified diff (no file headers found)")
        patches.append(Patch(
            name=name, path=ppath, sha256=hashlib.sha256(raw).hexdigest(), aliases=aliases,
            description=description, required=required,
            requires=_as_str_list(e.get("requires", []), manifest, f"{key}.requires"),
            files=files, added=added, removed=removed))
    names = {p.name for p in patches}
    for p in patches:
        for r in p.requires:
            if r not in names:
                target = seen.get(r)
                hint = f" (did you mean {target!r}? requires takes names, not aliases)" if target else ""
                raise ConfigError(manifest, f"patch.{p.name}.requires", f"unknown patch {r!r}{hint}; known: {', '.join(sorted(names))}")
    ps = PatchSet(root=root, patches=tuple(patches))
    dependency_order(ps, names)     # raises on cycles
    return ps


def resolve_name(ps: PatchSet, label: str) -> str:
    """Name or alias -> name; unknown labels list the valid ones."""
    for p in ps.patches:
        if label == p.name or label in p.aliases:
            return p.name
    valid = ", ".join(f"{p.name}" + (f" ({', '.join(p.aliases)})" if p.aliases else "") for p in ps.patches)
    raise UsageError(f"unknown patch {label!r}; valid names (aliases): {valid or 'none: the patch set is empty'}")


def closure(ps: PatchSet, names) -> frozenset[str]:
    """``names`` plus everything they require, transitively."""
    out = set(names)
    stack = list(names)
    while stack:
        for r in ps.get(stack.pop()).requires:
            if r not in out:
                out.add(r)
                stack.append(r)
    return frozenset(out)


def dependency_order(ps: PatchSet, names) -> list[Patch]:
    """The patches in ``names`` ordered so that requirements come first (manifest order otherwise)."""
    names = set(names)
    order: list[Patch] = []
    state: dict[str, int] = {}   # 1 visiting, 2 done

    def visit(name: str, path: tuple[str, ...]):
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join((*path[path.index(name):], name))
            raise ConfigError(ps.root / MANIFEST, f"patch.{name}.requires", f"dependency cycle: {cycle}")
        state[name] = 1
        for r in ps.get(name).requires:
            visit(r, (*path, name))
        state[name] = 2
        if name in names:
            order.append(ps.get(name))

    for p in ps.patches:
        if p.name in names:
            visit(p.name, ())
    # Cycle check for patches outside ``names`` too when validating the whole set.
    return order
