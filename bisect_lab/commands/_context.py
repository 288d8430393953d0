"""What every command is given besides its own options: the global ``--results``, ``--cache``
and ``--json``, and the places they lead to (results folder, tree cache, hosts), plus how a
result is printed (strict, redacted JSON, or the human rendering)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError


def bundled_demo() -> Path:
    """The demo experiment: packaged copy first, then the source checkout's."""
    here = Path(__file__).resolve().parent.parent
    for p in (here / "_bundled" / "experiments" / "demo.toml", here.parent / "experiments" / "demo.toml"):
        if p.is_file():
            return p
    raise UsageError("the bundled demo experiment is missing from this installation; pass an EXPERIMENT file")


def experiment_or_demo(path: str | None):
    """The experiment at ``path``, else the bundled demo."""
    from ..config import load_experiment
    return load_experiment(Path(path) if path else bundled_demo())


def to_json(obj) -> str:
    """Strict JSON (NaN and infinities become null): any JSON parser must read --json output.
    Redacted as the data, before the text: the output stays valid JSON."""
    from ..store import dumps
    return dumps(obj, redact=True)


@dataclass
class Context:
    """The global options of one command line, and what follows from them."""

    results: str | None = None
    cache: str | None = None
    json: bool = False
    _results_dir: Path | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_args(cls, args) -> "Context":
        """The global options out of parsed argv (``--json`` where the command has one)."""
        return cls(results=args.results, cache=args.cache, json=getattr(args, "json", False))

    def results_dir(self, exp=None) -> Path:
        """``--results``, else the default (never inside the target repository), said once on stderr."""
        from ..paths import results_dir
        if self._results_dir is None:
            d, note = results_dir(self.results, target_repo=exp.target.repo if exp is not None else None)
            if note:
                print(note, file=sys.stderr)
            self._results_dir = d
        return self._results_dir

    def cache_dir(self) -> Path:
        from ..paths import default_cache_dir
        return Path(self.cache) if self.cache else default_cache_dir()

    def hosts(self, exp):
        from ..hosts import make_hosts
        return make_hosts(exp.host, cache_dir=self.cache_dir())

    def emit(self, result, render) -> None:
        """A typed result as JSON with ``--json``, else through ``render(its dict, console)``."""
        data = result.to_dict()
        if self.json:
            print(to_json(data))
        else:
            from rich.console import Console
            from ..redact import redact_tree
            render(redact_tree(data), Console())
