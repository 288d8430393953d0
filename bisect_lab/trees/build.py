"""What a prepared tree needs before a trial: the target's build step (once per tree hash), the
PYTHONPATH of the tree's folders, and the import check (does the benchmark's interpreter import
the package under test from this tree?)."""
from __future__ import annotations

import posixpath
import re
import shlex
import time
from typing import Callable, Mapping

from ..model import Target
from .plumbing import HostGit
from .records import BuildError, ImportCheck, PreparedTree, replace_tree

_PYTHON_WORD = re.compile(r"^python(\d+(\.\d+)*)?$")


def benchmark_python(command: str, tree: str | None = None) -> str | None:
    """The interpreter a benchmark command starts: its first word named ``python``, ``python3``,
    ``python3.11`` (a path allowed: ``.venv/bin/python``, ``{tree}/env/bin/python``), or None
    (``torchrun ...``, ``bash run.sh``, or a command that does not parse)."""
    if tree is not None:
        command = command.replace("{tree}", shlex.quote(tree))
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for w in words:
        if "=" not in w and _PYTHON_WORD.match(posixpath.basename(w)):
            return w
    return None


class TreeBuild(HostGit):
    """The build-and-environment half of :class:`~bisect_lab.trees.TreeManager` (mixed into it)."""

    target: Target
    build_timeout_s: float
    log: Callable[[str], None]
    _build_failed: dict[str, BuildError]

    def build(self, tree: PreparedTree) -> PreparedTree:
        """Run the target's build step in ``tree`` once per tree hash (cached by a marker).

        Raises :class:`BuildError` with the tail of the output; a failure is remembered for the
        life of this manager (not on disk, so a transient failure is retried by the next campaign).
        """
        cmd = self.target.build
        if not cmd:
            return tree
        _, _, bmarker = self._paths(tree.key)
        info = self._read_json(bmarker)
        if info and info.get("tree_hash") == tree.tree_hash and info.get("command") == cmd:
            if not tree.reused:
                self._record_size(tree.key)     # prepare left the measuring to the build
            return replace_tree(tree, built=True)
        if tree.key in self._build_failed:
            raise self._build_failed[tree.key]
        self.log(f"building tree {tree.key}: {cmd}")
        res = self.host.run(cmd, timeout_s=self.build_timeout_s, cwd=tree.path,
                            env={**self.pythonpath_env(tree)})
        if not res.ok:
            out = (res.stdout + res.stderr).strip()
            tail = "\n".join(out.splitlines()[-30:])
            last = out.splitlines()[-1] if out else ""
            why = "timed out" if res.timed_out else f"exit {res.returncode}"
            err = BuildError(f"build step {cmd!r} failed in tree {tree.key} ({why}): {last[:300]}",
                             tree=tree.path, output_tail=tail)
            self._build_failed[tree.key] = err
            self._record_size(tree.key)         # the tree stays on disk, and counts
            raise err
        record = {"tree_hash": tree.tree_hash, "command": cmd, "duration_s": res.duration_s, "built": time.time()}
        state = self._status(tree.path)
        if state and state[1]:
            # A build that rewrites tracked files (a generated version file): that state, content
            # included, is what later reuses are checked against.
            record["tracked_changes"] = self._hashes(tree.path, state[1])
            self.log(f"build step {cmd!r} changed tracked files in tree {tree.key}: "
                     + ", ".join(sorted(state[1])[:5]))
        self._write_json(bmarker, record)
        self._record_size(tree.key)             # a build can grow the tree a lot: measured after it
        return replace_tree(tree, built=True)

    def pythonpath_env(self, tree: PreparedTree, inherited: str | None = None) -> dict[str, str]:
        """``{"PYTHONPATH": ...}`` with the tree folders of ``target.pythonpath`` first, then
        ``inherited`` (pass the trial's existing PYTHONPATH to keep it). ``{}`` when there is
        nothing to set."""
        parts = [posixpath.normpath(posixpath.join(tree.path, p)) for p in self.target.pythonpath]
        if inherited:
            parts.append(inherited)
        return {"PYTHONPATH": ":".join(parts)} if parts else {}

    def import_check(self, tree: PreparedTree, env: Mapping[str, str | None] | None = None, *,
                     cwd: str | None = None, python: str | None = None, command: str | None = None,
                     timeout_s: float = 120.0) -> tuple[bool, str]:
        """Verify that ``target.import_check`` resolves inside ``tree`` in the trial's environment.

        ``(True, origin)`` or ``(False, message)``: see :meth:`import_probe`, which also says which
        interpreter answered.
        """
        res = self.import_probe(tree, env, cwd=cwd, python=python, command=command, timeout_s=timeout_s)
        return res.ok, (res.origin if res.ok else res.message)

    def import_probe(self, tree: PreparedTree, env: Mapping[str, str | None] | None = None, *,
                     cwd: str | None = None, python: str | None = None, command: str | None = None,
                     timeout_s: float = 120.0) -> "ImportCheck":
        """Where ``target.import_check`` is imported from in the trial's environment, and whether
        that is inside ``tree``.

        The probe runs the benchmark's own interpreter: ``python``, else the first ``python*`` word
        of the benchmark ``command`` (``python3 bench.py``, ``.venv/bin/python -m x``,
        ``{tree}/env/bin/python``), else the host's (``host.python_exe``); with ``env``, the overlay
        the benchmark gets (default: :meth:`pythonpath_env`), in ``cwd`` (default: the tree), and
        without the working directory on ``sys.path`` (what ``-c`` would add and a benchmark script
        does not get): a package at the tree's root that only the working directory makes
        importable does not pass, while the benchmark would import an installed or PYTHONPATH copy.
        """
        mod = self.target.import_check
        if not mod:
            return ImportCheck(True, "", "", "", "no import check configured")
        env = dict(self.pythonpath_env(tree) if env is None else env)
        exe = python or benchmark_python(command or "", tree.path) or self.host.python_exe
        res = self.host.run([exe, "-c", _IMPORT_PROBE, mod, tree.path], timeout_s=timeout_s,
                            cwd=cwd or tree.path, env=env)
        lines = dict((l.split(" ", 1) + [""])[:2] for l in res.stdout.strip().splitlines() if l.strip())
        used = lines.get("PYTHON", exe)
        hint = (f"; list the tree folder that holds {mod} in [target] pythonpath (now "
                f"{list(self.target.pythonpath)}) or remove the other copy")
        if res.ok and "INSIDE" in lines:
            return ImportCheck(True, mod, lines["INSIDE"], used, f"import {mod} resolves inside the tree")
        if "OUTSIDE" in lines:
            return ImportCheck(False, mod, lines["OUTSIDE"], used,
                               f"import {mod} resolves to {lines['OUTSIDE']} with {used}, outside the prepared tree "
                               f"{tree.path}: the benchmark would measure that copy, not the tree under test "
                               f"(an installed or editable copy, or a PYTHONPATH entry, shadows it){hint}")
        if "MISSING" in lines:
            return ImportCheck(False, mod, "", used,
                               f"import {mod} cannot be found by {used} in the trial's environment, "
                               f"the working directory aside (tree {tree.path}){hint}")
        err = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return ImportCheck(False, mod, "", used,
                           f"import check of {mod} with {exe} failed ({'timed out' if res.timed_out else err})")



_IMPORT_PROBE = r"""
import importlib.util, os, sys
# Resolve the module the way the benchmark will import it: from PYTHONPATH, site-packages and .pth
# files. `-c` puts the working directory (the tree) first on sys.path, which the benchmark does not
# get when it is a script in a subfolder, a script elsewhere or an entry point: drop it, as
# `python -P` (3.11+) does, on any version.
if sys.path and sys.path[0] == "" and not getattr(sys.flags, "safe_path", False):
    del sys.path[0]
mod, root = sys.argv[1], os.path.realpath(sys.argv[2])
print("PYTHON", sys.executable)
try:
    spec = importlib.util.find_spec(mod)
except Exception as e:
    print("ERROR", repr(e)); sys.exit(3)
if spec is None:
    print("MISSING -"); sys.exit(3)
origin = spec.origin if spec.origin not in (None, "namespace", "built-in", "frozen") else \
    next(iter(spec.submodule_search_locations or []), None)
if origin is None:
    print("OUTSIDE", spec.origin); sys.exit(4)
real = os.path.realpath(origin)
inside = os.path.commonpath([real, root]) == root
print("INSIDE" if inside else "OUTSIDE", real)
sys.exit(0 if inside else 4)
"""
