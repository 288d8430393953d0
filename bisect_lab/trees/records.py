"""What the tree package hands out: prepared trees, commits, cache listings, check reports, errors.

Plain frozen dataclasses (plus :class:`BuildError`); no I/O here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Mapping

from ..errors import BisectLabError

# --------------------------------------------------------------------------- data
class BuildError(BisectLabError):
    """The per-tree build step failed; reported like a patch failure (the arm is untestable)."""

    def __init__(self, message: str, tree: str | None = None, output_tail: str = ""):
        self.tree = tree
        self.output_tail = output_tail
        super().__init__(message)


@dataclass(frozen=True)
class PreparedTree:
    """A ready tree on the host.

    ``path``: absolute folder on the host; ``commit``: the base commit; ``tree_hash``: git tree
    object id of base + patches (identical content -> identical hash); ``head``: the synthetic
    commit checked out in the worktree; ``key``: cache key (base + ordered patch hashes);
    ``patches``: names in the order applied; ``patch_hashes``: name -> sha256 of the patch file;
    ``reused``: True when an existing tree was returned; ``built``: the build step has succeeded.
    """

    path: str
    commit: str
    tree_hash: str
    key: str
    reused: bool
    patches: tuple[str, ...] = ()
    patch_hashes: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    head: str = ""
    built: bool = False


@dataclass(frozen=True)
class CommitInfo:
    """One commit: full sha, subject line, ``Name <email>``, ISO-8601 author date, parent shas."""

    sha: str
    subject: str
    author: str
    date: str
    parents: tuple[str, ...] = ()

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1


@dataclass(frozen=True)
class TreeEntry:
    """One cached tree, as listed by :func:`cache_info`."""

    repo: str               # the target repository it belongs to
    key: str
    path: str
    commit: str
    tree_hash: str
    patches: tuple[str, ...]
    last_used: float        # unix time (marker mtime; touched on every reuse)
    size_bytes: int | None  # None when not measured
    built: bool

    def to_dict(self) -> dict:
        d = asdict(self)
        d["patches"] = list(self.patches)
        return d


@dataclass(frozen=True)
class RepoEntry:
    repo: str
    path: str               # the cache folder of this repository
    trees: int


@dataclass(frozen=True)
class OutEntry:
    """The per-trial ``{out}`` folders of one campaign on a host (``out/<campaign>/<trial>``, a
    serving session's readings in ``out/<campaign>/session-<name>/<reading>``)."""

    campaign: str
    path: str
    trials: int             # trial folders in it, a session's readings counted one by one
    last_used: float        # unix time (folder mtime: a new trial folder bumps it)
    size_bytes: int | None  # None when not measured
    sessions: int = 0       # serving sessions' folders among them

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CacheInfo:
    """What ``bisect-lab cache`` shows."""

    root: str
    repos: tuple[RepoEntry, ...]
    trees: tuple[TreeEntry, ...]
    outputs: tuple[OutEntry, ...] = ()

    @property
    def out_bytes(self) -> int:
        return sum(o.size_bytes or 0 for o in self.outputs)

    @property
    def total_bytes(self) -> int:
        """Trees and ``{out}`` folders together (what measured sizes there are)."""
        return sum(t.size_bytes or 0 for t in self.trees) + self.out_bytes

    def to_dict(self) -> dict:
        """Plain data for ``--json``: root, total_bytes, out_bytes, repos, trees (LRU first) and
        outputs (the per-trial ``{out}`` folders by campaign, least recently used first)."""
        return {"root": self.root, "total_bytes": self.total_bytes, "out_bytes": self.out_bytes,
                "repos": [asdict(r) for r in self.repos], "trees": [t.to_dict() for t in self.trees],
                "outputs": [o.to_dict() for o in self.outputs]}


class Pruned(list):
    """The trees :func:`prune_cache` removed (a list, as before), with the ``{out}`` folders it
    removed as ``.outputs``."""

    outputs: list[OutEntry]

    def __init__(self, trees=(), outputs=()):
        super().__init__(trees)
        self.outputs = list(outputs)


@dataclass(frozen=True)
class CheckFailure:
    """One problem found by :func:`check_patchset`.

    ``kind``: ``"alone"`` (a patch with what it requires), ``"full-set"`` or ``"pair"``;
    ``patches``: what was being combined (one name, all names, or the pair); ``patch``: the patch
    that failed to apply; ``file``: the failing file (from git's message) when known.
    """

    kind: str
    patches: tuple[str, ...]
    patch: str
    file: str | None
    message: str

    def line(self) -> str:
        where = f" ({self.file})" if self.file else ""
        if self.kind == "pair":
            return f"conflict: {self.patches[0]} + {self.patches[1]}: {self.patch} fails{where}: {self.message}"
        if self.kind == "full-set":
            return f"full set: {self.patch} fails{where}: {self.message}"
        return f"{self.patches[0]}: {self.patch} fails{where}: {self.message}"


@dataclass(frozen=True)
class CheckReport:
    """Result of :func:`check_patchset`. ``ok`` is False when anything fails to apply."""

    ref: str
    base: str
    patches: tuple[str, ...]
    alone: tuple[CheckFailure, ...] = ()
    full_set: CheckFailure | None = None
    conflicts: tuple[CheckFailure, ...] = ()
    pairs_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.alone and self.full_set is None and not self.conflicts

    @property
    def failures(self) -> tuple[CheckFailure, ...]:
        return (*self.alone, *((self.full_set,) if self.full_set else ()), *self.conflicts)

    @property
    def problems(self) -> list[str]:
        """One line per failure (empty when ok)."""
        return [f.line() for f in self.failures]

    def to_dict(self) -> dict:
        """Plain data for ``--json``."""
        return {"ok": self.ok, "ref": self.ref, "base": self.base, "patches": list(self.patches),
                "pairs_checked": self.pairs_checked,
                "alone": [asdict(f) for f in self.alone],
                "full_set": asdict(self.full_set) if self.full_set else None,
                "conflicts": [asdict(f) for f in self.conflicts], "problems": self.problems}

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """Human-readable lines (the CLI prints them)."""
        head = f"{len(self.patches)} patches checked against {self.ref} ({self.base[:12]}), {self.pairs_checked} overlapping pairs"
        if self.ok:
            return [head + ": all apply, alone, together and in pairs"]
        return [head + ":"] + ["  " + f.line() for f in self.failures]


@dataclass(frozen=True)
class ImportCheck:
    """What :meth:`TreeManager.import_probe` found: ``origin`` is the file the module resolves to
    (empty when it does not resolve), ``python`` the interpreter that answered."""

    ok: bool
    module: str
    origin: str
    python: str
    message: str

    def to_dict(self) -> dict:
        return {"module": self.module, "origin": self.origin, "python": self.python, "ok": self.ok}



def replace_tree(tree: PreparedTree, **kw) -> PreparedTree:
    """A copy of ``tree`` with fields changed (``built=True`` after the build step)."""
    return replace(tree, **kw)
