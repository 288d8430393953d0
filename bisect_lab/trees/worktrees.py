"""One git worktree per arm: applying patches, creating, reusing (verified), and removing trees.

How a tree is made (:meth:`Worktrees.prepare`): the patches are applied in dependency order to a
*temporary index* holding the base commit (``git apply --cached``), so a patch that does not apply
fails before any worktree exists (nothing half-applied can be left behind or reused); the result
is written as a tree object (its id is :attr:`PreparedTree.tree_hash`) and a deterministic commit
whose parent is the base; ``git worktree add --detach`` checks that commit out. ``git status`` in
a tree is therefore clean right after preparation, which is what :meth:`Worktrees.verify` uses.

A reuse is a marker read plus one ``git status`` of the tracked files (a benchmark may have
modified its tree: a tree whose tracked files or HEAD changed is rebuilt, untracked build outputs
do not count). Removal is :func:`remove_tree`, one host command, and nothing else removes a tree.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import PatchError, UsageError
from ..hosts.base import Host, HostCommandError
from ..model import Patch, PatchSet, Target
from ..patchset import closure, dependency_order
from ..redact import redact_text
from .plumbing import GIT_ENV, IDENTITY, SHA_RE, HostGit, apply_error, git_argv, parse_status, tree_key
from .records import PreparedTree

# The git wrapper and the one removal of a tree, shared by the apply script and remove_tree().
# remove_tree: markers first (from that instant the tree is never reused), then the worktree,
# whatever is left of the folder, and git's registration of it.
_TREE_FUNCTIONS = r"""
g() { git -c gc.auto=0 -c maintenance.auto=0 -c core.hooksPath=/dev/null --git-dir "$git_dir" "$@"; }
remove_tree() {
    rm -f "$1.json" "$1.build.json"
    g worktree remove --force --force "$1" 2>/dev/null
    rm -rf "$1"
    g worktree prune
}
"""

# argv: git_dir path. The tree's lock file goes too (the tree is gone).
_REMOVE_SCRIPT = "set -u\ngit_dir=$1 path=$2\n" + _TREE_FUNCTIONS + 'remove_tree "$path"\nrm -f "$path.lock"\n'


def remove_tree(host: Host, git_dir: str, path: str, *, timeout_s: float = 600.0) -> bool:
    """Remove the tree at ``path`` (a worktree of the clone cache ``git_dir``) with its markers,
    in one host command. The only removal of a tree: rebuilds, LRU pruning and ``cache prune``
    all come here. Returns whether the command succeeded."""
    return host.run(["bash", "-c", _REMOVE_SCRIPT, "bisect-lab-remove", git_dir, path], timeout_s=timeout_s,
                    env=GIT_ENV).ok


_FAILED_AT = re.compile(r"^error: patch failed: (?P<file>.+):(?P<line>\d+)$", re.M)
_HUNK = re.compile(r"^@@ -(?P<start>\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def failed_hunk(patch_path, stderr: str) -> str | None:
    """The hunk ``git apply`` stopped at, named as a person finds it in the patch file: ``hunk #2
    (line 14 of the patch): @@ -10,3 +10,4 @@ def f`` (git names only the file and the line the hunk
    starts at in it). None when git's message or the local patch file does not tell."""
    m = _FAILED_AT.search(stderr or "")
    if not m:
        return None
    try:
        text = Path(patch_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    file, start = m.group("file"), m.group("line")
    in_file, n = False, 0
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("diff --git "):
            in_file = line.endswith(f" b/{file}") or f" a/{file} " in line
            n = 0
        elif in_file and line.startswith("@@"):
            n += 1
            h = _HUNK.match(line)
            if h and h.group("start") == start:
                return f"hunk #{n} (line {no} of the patch): {line[:120]}"
    return None


class Worktrees(HostGit):
    """The worktree half of :class:`~bisect_lab.trees.TreeManager` (mixed into it)."""

    target: Target
    patchset: PatchSet | None
    root: str
    trees_dir: str
    max_bytes: int | None
    log: Callable[[str], None]
    _shipped: dict[str, str]

    # ------------------------------------------------------------------ patches
    def _ordered(self, names: Iterable[str]) -> list[Patch]:
        names = list(names)
        if not names:
            return []
        if self.patchset is None:
            raise UsageError(f"patches {', '.join(sorted(names))} requested but the target has no patch set")
        valid = set(self.patchset.names)
        unknown = [n for n in names if n not in valid]
        if unknown:
            raise UsageError(f"unknown patch {unknown[0]!r}; valid names: {', '.join(self.patchset.names)}")
        return dependency_order(self.patchset, closure(self.patchset, names))

    def _patch_path(self, p: Patch) -> str:
        """Where the patch file is on the host (copied there, content-addressed, when remote)."""
        if self.host.is_local:
            return str(p.path)
        remote = posixpath.join(self.root, "patches", f"{p.sha256}.patch")
        if self._shipped.get(p.sha256) != remote:
            if not self.host.exists(remote):
                self.host.write_bytes(remote, Path(p.path).read_bytes())
            self._shipped[p.sha256] = remote
        return remote

    def _apply(self, commit: str, patches: Sequence[Patch], *, create: str | None = None,
               message: str = "", marker: str = "") -> tuple[str, str | None, set[str]]:
        """Apply ``patches`` in order to a temporary index of ``commit`` and write the tree;
        with ``create`` (a tree path) also make the tree's commit and check it out there.

        One host command runs the whole pipeline (:data:`_APPLY_SCRIPT`): on a remote host every
        round trip costs, so preparing a tree is one of them. ``marker`` is the ready marker's JSON
        with ``@TREE@``/``@HEAD@`` placeholders, written last by the script. Returns (tree id, head
        commit or None, flags: ``DISCARDED`` a leftover folder was removed, ``READY`` another
        process prepared this tree meanwhile, ``MISSING`` the clone cache has no commit ``commit``
        (nothing was done)). Raises :class:`PatchError` naming the first patch that does not apply
        and its file; nothing is left behind then.
        """
        argv = ["bash", "-c", _APPLY_SCRIPT, "bisect-lab-apply", self.git_dir, self._tmp_index(), commit,
                create or "", message, marker, *(self._patch_path(p) for p in patches)]
        res = self._run(argv, what="applying patches", env=IDENTITY, check=False)
        out = dict((line.split(" ", 1) + [""])[:2] for line in res.stdout.splitlines() if line.strip())
        if "MISSING" in out and create and not res.timed_out:
            return "", None, {"MISSING"}
        if "FAILED" in out and not res.timed_out:
            p = patches[int(out["FAILED"])]
            file, reason = apply_error(res.stderr)
            where = f" at {file}" if file else ""
            hunk = failed_hunk(p.path, res.stderr)
            where += f", {hunk}" if hunk else ""
            err = PatchError(f"patch {p.name!r} does not apply to {commit[:12]}{where}: {reason}",
                             patch=p.name, file=file)
            err.hunk, err.reason = hunk, reason           # patches check lays its line out from these
            raise err
        ready = bool(create) and "READY" in out           # another process made it: its marker says the rest
        if not res.ok or not ("TREE" in out or ready) or (create and not ({"DONE", "READY"} & set(out))):
            raise HostCommandError(f"preparing a tree of {commit[:12]}" if create else "git apply --cached", res)
        return out.get("TREE", ""), out.get("HEAD"), {k for k in ("DISCARDED", "READY") if k in out}

    def _tmp_index(self) -> str:
        return posixpath.join(self.root, "tmp", f"index-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    def apply_check(self, patch_names: Iterable[str], commit: str | None = None, *,
                    expand: bool = True) -> str:
        """Check that the patches (with what they require, in dependency order) apply to
        ``commit``; return the resulting tree id without creating any worktree.
        ``expand=False`` applies exactly ``patch_names`` in the given order."""
        commit = self.resolve(commit) if commit else self.resolve()
        patches = self._ordered(patch_names) if expand else [self.patchset.get(n) for n in patch_names]
        return self._apply(commit, patches)[0]

    # ------------------------------------------------------------------ trees
    def _paths(self, key: str) -> tuple[str, str, str]:
        base = posixpath.join(self.trees_dir, key)
        return base, base + ".json", base + ".build.json"

    def prepare(self, arm_patches: Iterable[str] = (), commit: str | None = None, *,
                build: bool = True) -> PreparedTree:
        """A clean tree of ``commit`` (default: the target's ref) with ``arm_patches`` applied.

        Patches are applied with what they require, in dependency order. A tree with the same key
        (base commit + ordered patch contents) that is already prepared is reused after one
        ``git status`` (:meth:`tree_changes`); one whose tracked files or HEAD changed since is
        rebuilt, with a warning in the log naming the changes. ``build``: run the target's build
        step (once per tree hash).

        Raises :class:`PatchError` (patch and file named; no tree is left behind),
        :class:`BuildError`, :class:`UsageError` (unknown patch or ref).
        """
        patches = self._ordered(arm_patches)
        if commit is None or not SHA_RE.match(commit):
            commit = self.resolve(commit) if commit else self.resolve()
        hashes = {p.name: p.sha256 for p in patches}
        key = tree_key(commit, [p.sha256 for p in patches])
        path, marker, _ = self._paths(key)
        info = self._read_json(marker)
        tree = None
        if info is not None and info.get("key") == key:
            # Hot path: the marker, an mtime bump for the LRU order and one `git status` (the
            # benchmark of an earlier trial may have edited the tree: trust is checked, not assumed).
            tree = PreparedTree(path=path, commit=commit, tree_hash=info["tree_hash"], key=key, reused=True,
                                patches=tuple(hashes), patch_hashes=hashes, head=info.get("head", ""))
            changes = self.tree_changes(tree, touch=marker)
            if changes:
                shown = "; ".join(changes[:5]) + (f"; and {len(changes) - 5} more" if len(changes) > 5 else "")
                self.log(f"warning: tree {key} ({commit[:12]} + {', '.join(hashes) or 'no patches'}) was modified "
                         f"after it was prepared ({shown}): rebuilding it")
                self._remove(key)
                tree = None
        builds = bool(build and self.target.build)
        if tree is None:
            # A build that follows measures the tree's size itself, after it has grown.
            tree = self._create(key, commit, patches, measure=not builds)
        if builds:
            tree = self.build(tree)
        return tree

    def _create(self, key: str, commit: str, patches: list[Patch], *, measure: bool = True) -> PreparedTree:
        self._ensure_repo()
        if not SHA_RE.match(commit):
            commit = self.resolve(commit)
        path, marker, build_marker = self._paths(key)
        hashes = {p.name: p.sha256 for p in patches}
        msg = f"bisect-lab tree {key}\n\nbase {commit}\n" + "".join(f"patch {p.name} {p.sha256}\n" for p in patches)
        # The marker is written by the script itself, last and under the tree's lock, so a
        # concurrent preparation of the same arm waits and then reuses it.
        template = json.dumps({"key": key, "commit": commit, "tree_hash": "@TREE@", "head": "@HEAD@",
                               "patches": list(hashes), "patch_hashes": hashes,
                               "repo": redact_text(self.target.repo), "created": time.time()},
                              indent=1, sort_keys=True)
        # A full sha goes straight to the script, which checks that it is a commit of the cache
        # (no rev-parse of its own); only a sha the cache lacks costs a resolve (and a fetch).
        tree_hash, head, flags = self._apply(commit, patches, create=path, message=msg, marker=template)
        if "MISSING" in flags:
            if self.resolve(commit) != commit:
                raise UsageError(f"{commit} is not a commit of {self.target.repo}")
            tree_hash, head, flags = self._apply(commit, patches, create=path, message=msg, marker=template)
            if "MISSING" in flags:
                raise UsageError(f"unknown ref {commit!r} in {self.target.repo} (not a commit, branch or tag there)")
        if "READY" in flags:
            info = self._read_json(marker) or {}
            return PreparedTree(path=path, commit=commit, tree_hash=info.get("tree_hash", tree_hash), key=key,
                                reused=True, patches=tuple(hashes), patch_hashes=hashes,
                                head=info.get("head", ""))
        if "DISCARDED" in flags:
            # A leftover folder without marker: a crashed or interrupted preparation.
            self.log(f"discarded half-prepared tree {path}")
        self.log(f"prepared tree {key} ({commit[:12]} + {', '.join(hashes) or 'no patches'})")
        if measure:
            self._record_size(key)
        tree = PreparedTree(path=path, commit=commit, tree_hash=tree_hash, key=key, reused=False,
                            patches=tuple(hashes), patch_hashes=hashes, head=head or "")
        self._enforce_limits(keep={key})
        return tree

    def _record_size(self, key: str) -> None:
        """Store the tree's size (``du``) in its ready marker; only when ``max_bytes`` bounds the cache."""
        if self.max_bytes is None:
            return
        path, marker, _ = self._paths(key)
        data = self._read_json(marker)
        if data:
            res = self._run(["du", "-sk", path], what="du", check=False, timeout_s=300)
            try:
                data["size_bytes"] = int(res.stdout.split()[0]) * 1024
            except (IndexError, ValueError):
                data["size_bytes"] = None
            self._write_json(marker, data)

    def _remove(self, key: str) -> None:
        remove_tree(self.host, self.git_dir, self._paths(key)[0], timeout_s=max(600.0, self.git_timeout_s))

    def verify(self, tree: PreparedTree) -> bool:
        """True when ``tree`` still holds exactly what was prepared (and built): see
        :meth:`tree_changes`."""
        return not self.tree_changes(tree)

    def tree_changes(self, tree: PreparedTree, *, touch: str | None = None) -> list[str]:
        """What differs in ``tree`` from what was prepared, one short line per change
        (``"deleted knobs_slow.py"``, ``"HEAD is 0123456789ab, not the prepared ..."``); empty when
        the tree is intact.

        One ``git status`` (tracked files only: git compares each file's stat data with its index,
        ctime included, which no program can set back, and hashes the content when in doubt), so
        untracked build outputs (``pip install -e .``, compiled extensions, ``build/``) never count
        while a modified, deleted or staged tracked file, or a moved HEAD, does. Changes to tracked
        files that the build step itself made are its baseline (recorded with their content hash
        by :meth:`build`), not changes. ``touch``: also bump this marker's mtime in the same host
        command (one round trip over SSH).
        """
        state = self._status(tree.path, touch=touch)
        if state is None:
            return [f"the tree folder {tree.path} is missing or not a git worktree"]
        head, entries = state
        changes = []
        if tree.head and head != tree.head:
            changes.append(f"HEAD is {head[:12] or '(none)'}, not the prepared {tree.head[:12]}")
        if entries and self.target.build:
            baseline = (self._read_json(self._paths(tree.key)[2]) or {}).get("tracked_changes")
            if baseline is not None and sorted(baseline) == sorted(entries) and \
                    self._hashes(tree.path, entries) == baseline:
                entries = {}
        changes += [f"{what} {path}" for path, what in sorted(entries.items())]
        return changes

    def _status(self, path: str, *, touch: str | None = None) -> tuple[str, dict[str, str]] | None:
        """(HEAD sha, {path: "modified"|"deleted"|...}) of a worktree, or None when it is not one."""
        argv = git_argv("-C", path, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=no",
                    "--ignore-submodules=all")
        # Optional locks allowed: git may write back the refreshed index, so files checked out in the
        # same instant as the index (racily clean) are hashed once, not on every reuse.
        env = {**GIT_ENV, "GIT_OPTIONAL_LOCKS": None}
        if touch and self.host.is_local:
            self._touch(touch)
        elif touch:
            argv = ["sh", "-c", 'touch -c "$1" 2>/dev/null; shift; exec "$@"', "bisect-lab-verify", touch, *argv]
        res = self.host.quick(argv, timeout_s=self.git_timeout_s, env=env)
        if not res.ok:
            return None
        return parse_status(res.stdout)

    def _hashes(self, path: str, entries: Mapping[str, str]) -> dict[str, str]:
        """{path: [what, content hash or ""]} of changed tracked files (a build's baseline)."""
        present = [p for p, what in sorted(entries.items()) if what != "deleted"]
        ids: list[str] = []
        if present:
            res = self._run(git_argv("-C", path, "hash-object", "--", *present), what="git hash-object", check=False)
            ids = res.stdout.split() if res.ok else []
        blobs = dict(zip(present, ids)) if len(ids) == len(present) else {}
        return {p: [what, blobs.get(p, "")] for p, what in entries.items()}



# The tree pipeline as one host command (argv: git_dir index commit path message marker patches...).
# stdout protocol: "MISSING" (no such commit in the cache), "TREE <id>", "HEAD <sha>", "DISCARDED",
# "READY", "DONE", or "FAILED <i>" (patch i, with git apply's stderr on stderr). Arguments arrive as
# argv: nothing is interpolated into the script.
_APPLY_SCRIPT = r"""
set -u
git_dir=$1 index=$2 commit=$3 path=$4 msg=$5 marker=$6
shift 6
""" + _TREE_FUNCTIONS + r"""
if [ $# -eq 0 ]; then
    # No patches: the base's own tree (also the check that $commit is a commit the cache holds).
    tree=$(g rev-parse -q --verify "$commit^{commit}^{tree}") || { echo "MISSING"; exit 2; }
else
    trap 'rm -f "$index" "$index.lock"' EXIT
    mkdir -p "${index%/*}" || exit 1
    export GIT_INDEX_FILE=$index
    # Also the check that $commit is a commit the cache holds (the caller resolves it only if not).
    if ! g read-tree "$commit^{commit}" 2>/dev/null; then
        g cat-file -e "$commit^{commit}" 2>/dev/null && exit 2
        echo "MISSING"; exit 2
    fi
    # One git apply for all (all-or-nothing: the index is written only if every patch applies;
    # successive patches to a file are fine). On failure, patch by patch to name the culprit.
    if ! g apply --cached --whitespace=nowarn "$@" 2>/dev/null; then
        g read-tree "$commit" || exit 2
        i=0
        for p in "$@"; do
            g apply --cached --whitespace=nowarn "$p" || { echo "FAILED $i"; exit 3; }
            i=$((i + 1))
        done
    fi
    tree=$(g write-tree) || exit 4
    # From here on the tree's own index must be used, not the temporary one.
    unset GIT_INDEX_FILE
fi
echo "TREE $tree"
[ -n "$path" ] || exit 0
mkdir -p "${path%/*}" || exit 1
# One preparation of a given tree at a time on this host; a waiter finds the marker and reuses.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$path.lock" && flock -w 3600 9 || exit 7
    if [ -s "$path.json" ]; then echo "READY"; exit 0; fi
fi
head=$(g commit-tree "$tree" -p "$commit" -m "$msg") || exit 5
echo "HEAD $head"
if [ -e "$path" ]; then
    echo "DISCARDED"
    remove_tree "$path"
fi
if ! out=$(g worktree add -q --detach "$path" "$head" 2>&1); then
    case $out in
    *"already registered"*)
        # The folder was deleted by hand: forget the stale registration and retry once.
        g worktree prune
        out=$(g worktree add -q --detach "$path" "$head" 2>&1) || { echo "$out" >&2; remove_tree "$path"; exit 6; } ;;
    *)
        echo "$out" >&2; remove_tree "$path"; exit 6 ;;
    esac
fi
# The ready marker, last: written to a temporary name and renamed, so it is whole or absent.
m=${marker//@TREE@/$tree}
m=${m//@HEAD@/$head}
printf '%s' "$m" > "$path.json.tmp-$$" && mv -f "$path.json.tmp-$$" "$path.json" || exit 8
echo "DONE"
"""
