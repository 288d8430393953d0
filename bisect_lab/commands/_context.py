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


# Set once the bundled demo stands in for a missing EXPERIMENT: an error listing valid names
# then says they are the demo's (cli.py reads it), so a typo'd arm never reads as the user's own.
demo_in_use = False


def experiment_or_demo(path: str | None):
    """The experiment at ``path``, else the bundled demo, said on stderr (never a silent default)."""
    global demo_in_use
    from ..config import load_experiment
    if path:
        return load_experiment(Path(path))
    demo = bundled_demo()
    print(f"no EXPERIMENT given: using the bundled demo {demo} (pass an experiment file to measure your own)",
          file=sys.stderr)
    demo_in_use = True
    return load_experiment(demo)


def is_bundled_demo(exp) -> bool:
    """Whether ``exp`` is one of the experiments shipped with bisect-lab (``demo.toml`` and its
    siblings: ``demo-server.toml``, ``sweep-demo.toml``, ...): their results go to the user data
    dir, never into the installation (``experiments/results`` of the checkout, or site-packages)."""
    try:
        return exp.path is not None and Path(exp.path).resolve().parent == bundled_demo().resolve().parent
    except UsageError:
        return False


def to_json(obj) -> str:
    """Strict JSON (NaN and infinities become null): any JSON parser must read --json output.
    Redacted as the data, before the text: the output stays valid JSON."""
    from ..store import dumps
    return dumps(obj, redact=True)


def console(stderr: bool = False):
    """A rich Console that lays tables out for the terminal, and when piped (a log, ``| less``,
    CI) for ``$COLUMNS`` or a wide line: rich's 80 columns would wrap every table row."""
    import os
    from rich.console import Console
    c = Console(stderr=stderr)
    if not c.is_terminal:
        try:
            width = int(os.environ.get("COLUMNS") or 0)
        except ValueError:
            width = 0
        c = Console(stderr=stderr, width=width or PIPED_WIDTH)
    return c


PIPED_WIDTH = 200


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
        """Where results go (see :mod:`bisect_lab.paths`): ``--results``, else beside the experiment
        ``exp`` (never inside its target repository; the user data dir for the bundled demo), else
        found again from the current folder or the last campaign. Said once on stderr: always for a
        campaign's experiment, only for a default otherwise."""
        from ..paths import results_dir
        if self._results_dir is None:
            if exp is not None:
                d, note = results_dir(self.results, experiment=exp.path, target_repo=exp.target.repo,
                                      demo=is_bundled_demo(exp))
            else:
                d, note = results_dir(self.results)
            if exp is not None or not self.chose_results:
                print(note, file=sys.stderr)
            self._results_dir = d
        return self._results_dir

    @property
    def chose_results(self) -> bool:
        """The user named the results folder (``--results`` or ``BISECT_LAB_RESULTS``)."""
        import os
        return bool(self.results or os.environ.get("BISECT_LAB_RESULTS"))

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
            from ..redact import redact_tree
            render(redact_tree(data), console())
