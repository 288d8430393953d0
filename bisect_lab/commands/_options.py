"""The options several commands share, each defined once: what they are called, what they
accept and what their help says, so that ``run``, ``attribute`` and ``bisect`` cannot drift apart.

A command's ``setup_arguments`` picks from these; its ``run_from_args`` reads them back.
"""
from __future__ import annotations

import argparse
import os

from .. import __version__
from ..errors import UsageError

JSON_HELP = "print one JSON object on stdout and nothing else"


def positive_int(text: str) -> int:
    """argparse type: a whole number of 1 or more (a trial count, a budget)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {n}")
    return n


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """``--results``, ``--cache``, ``--debug``, ``--version``: given before the command."""
    parser.add_argument("--results", help="results folder (default: results/ beside the experiment file, the user data "
                                          "dir for the bundled demo or an experiment inside its target repository; "
                                          "without an experiment ./results or the last campaign's; env BISECT_LAB_RESULTS)")
    parser.add_argument("--cache", help="clone/tree cache (default user cache dir, env BISECT_LAB_CACHE)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"bisect-lab {__version__}")


def add_json(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--json``; the commands that take an EXPERIMENT say what it does, the others do not."""
    parser.add_argument("--json", action="store_true", help=help)


def add_experiment(parser: argparse.ArgumentParser, experiment: bool = True) -> None:
    """The optional EXPERIMENT positional (the bundled demo when left out) and ``--json``."""
    if experiment:
        parser.add_argument("experiment", nargs="?", help="experiment TOML file (default: the bundled demo)")
    add_json(parser, help=JSON_HELP)


def add_arms(parser: argparse.ArgumentParser, flag: str, *, required: bool = False, append: bool = False,
             help: str | None = None) -> None:
    """An option taking one arm spec as several shell words (``--patches all-minus topk``);
    with ``append``, repeating it gives more arms. Read back with :func:`arm_words`."""
    parser.add_argument(flag, nargs="+", metavar="ARM", required=required, help=help,
                        action="append" if append else "store")


def add_resume(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--resume [CAMPAIGN]``: the latest matching campaign when no id is given; what the command
    line leaves out (EXPERIMENT, arms, budget) is the campaign's own (see ``_session.resume_point``)."""
    parser.add_argument("--resume", nargs="?", const=True, metavar="CAMPAIGN", help=help)


def require_unless_resume(args, command: str, *options: str) -> None:
    """Options required unless ``--resume`` reads them back from the campaign (``attribute`` and
    ``bisect`` ``--good`` / ``--bad``): without ``--resume``, a missing one is the usage line
    argparse gives for a required option."""
    if args.resume:
        return
    missing = [o for o in options if getattr(args, o.lstrip("-").replace("-", "_")) is None]
    if missing:
        raise UsageError(f"bisect-lab {command}: the following arguments are required: {', '.join(missing)}")


def add_max_trials(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-trials", type=positive_int,
                        help="budget (default [design] max_trials; with --resume the campaign's own; a larger "
                             "one lets a campaign that its budget cut short go on)")


def add_repeat(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=positive_int,
                        help="trials per arm (default [design] repeat; with --resume the campaign's own; a larger "
                             "one measures more in a finished campaign)")


def arm_words(groups, args) -> list[str]:
    """Join the words of each ``--patches/--good/--bad`` occurrence into one arm spec.

    ``--patches all-minus topk`` arrives unquoted from the shell as two words; a word
    that names an experiment file (``*.toml`` or an existing file) is the EXPERIMENT
    positional that the option swallowed, and is given back to it (``args.experiment``).
    """
    specs = []
    for words in groups or []:
        words = [words] if isinstance(words, str) else list(words)
        keep = []
        for w in words:
            if (w.endswith(".toml") or (os.path.isfile(w) and "=" not in w)) and not getattr(args, "experiment", None):
                args.experiment = w
            else:
                keep.append(w)
        if keep:
            specs.append(" ".join(keep))
    return specs


def one_arm(words, args, option: str) -> str:
    """The one arm spec of ``--good`` / ``--bad`` / a bisection's ``--patches`` (see :func:`arm_words`);
    a usage error when its words were only the experiment file."""
    specs = arm_words([words], args)
    if not specs:
        raise UsageError(f"{option} names no arm (only the experiment file {args.experiment}): "
                         f"give an arm spec, e.g. {option} none")
    return specs[0]


def add_seed(parser: argparse.ArgumentParser) -> None:
    """``--seed N``: the experiment's ``[design] seed`` for this campaign only (a copy of the TOML
    would be a new experiment, and planning would forget the measurements made under the old one)."""
    parser.add_argument("--seed", type=int,
                        help="random seed of the run order and the search (default [design] seed; with --resume "
                             "the campaign's own)")


def with_seed(exp, seed: int | None, stored=None):
    """``exp`` with ``[design] seed`` = ``seed``; None keeps a resumed campaign's own seed (``stored``,
    the campaign read back), else the experiment's."""
    import dataclasses
    if seed is None and stored is not None and isinstance(stored.params.get("seed"), int):
        seed = stored.params["seed"]
    if seed is None or seed == exp.design.seed:
        return exp
    return dataclasses.replace(exp, design=dataclasses.replace(exp.design, seed=seed))


LOOK_FOR = ("regression", "improvement")


def add_terms(parser: argparse.ArgumentParser) -> None:
    """``--look-for`` and ``--term-old`` / ``--term-new``, as ``git bisect`` names the two sides."""
    parser.add_argument("--look-for", choices=LOOK_FOR,
                        help="what the first commit of the new side did: regression (default: it made the metric "
                             "worse) or improvement (it made it better; the old side is slow, the new fast)")
    parser.add_argument("--term-old", metavar="WORD",
                        help="what to call the --good (old) side in the output (default good, or slow with "
                             "--look-for improvement), as git bisect --term-old")
    parser.add_argument("--term-new", metavar="WORD",
                        help="what to call the --bad (new) side (default bad, or fast with --look-for improvement)")


def bisect_terms(look_for: str | None, term_old: str | None, term_new: str | None) -> dict:
    """The campaign parameters that name a bisection's sides; empty for the defaults (a regression,
    good / bad), so that campaigns stored before these options resume as they were."""
    look_for = look_for or "regression"
    default_old, default_new = ("slow", "fast") if look_for == "improvement" else ("good", "bad")
    for word in (term_old, term_new):
        if word is not None and (not word.strip() or len(word.split()) != 1):
            raise UsageError(f"--term-old / --term-new take one word, got {word!r}")
    terms = {"look_for": look_for, "term_old": term_old or default_old, "term_new": term_new or default_new}
    if terms["term_old"] == terms["term_new"]:
        raise UsageError(f"--term-old and --term-new are both {terms['term_old']!r}: give two different words")
    return {} if terms == {"look_for": "regression", "term_old": "good", "term_new": "bad"} else terms


def add_baseline(parser: argparse.ArgumentParser) -> None:
    """``--baseline ARM``: the arm every other arm of a ``run`` is compared with."""
    add_arms(parser, "--baseline", help="the arm the others are compared with, measured too (default: the first "
                                        "--patches given; none beside a lone --patches ARM, or no --patches)")


def typed_forms(arms, patchset) -> dict[str, str]:
    """``{canonical spec: what the user typed}`` for the arms whose typed form differs from their
    canonical one by more than quoting: `only a,b` reads as `all-minus c,d`, which means something
    else once a patch is added, so the output shows both."""
    import shlex

    from ..arms import parse_arm

    def words(spec: str) -> list[str]:
        try:
            return shlex.split(spec)
        except ValueError:
            return spec.split()

    typed: dict[str, str] = {}
    for a in arms:
        if a is None:
            continue
        spec = parse_arm(a, patchset).spec
        if words(a) != words(spec):
            typed.setdefault(spec, " ".join(a.split()))
    return typed
