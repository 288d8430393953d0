"""The command package's wiring, in process: every command module has the three parts, its parser
calls its own ``run_from_args``, the shared options are the same wherever they appear, and only
``run_from_args`` reads ``args``."""
import argparse
import ast
import inspect
import signal

import pytest

from bisect_lab import cli, commands
from bisect_lab.commands import _options


def main_in_process(capsys, *argv):
    """``bisect-lab ARGV`` through ``cli.main`` in this process: (exit code, stdout, stderr).
    The signal handlers main installs are put back, so the test process is left as it was."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        code = cli.main([str(a) for a in argv])
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [l for l in err.splitlines() if l.startswith("bisect-lab: error:")]
    assert len(lines) == 1, err
    return lines[0]


NAMES = ["run", "attribute", "bisect", "patches", "cache", "gpu", "diff", "report", "log", "recheck", "sweep", "compare", "init",
         "check", "verdict"]
# the shortest argv that reaches each command's run_from_args
MINIMAL = {"run": ["run"], "attribute": ["attribute", "--good", "none", "--bad", "all"],
           "bisect": ["bisect", "--good", "a", "--bad", "b"], "patches": ["patches", "list"], "cache": ["cache"],
           "gpu": ["gpu", "status"], "diff": ["diff", "a", "b"], "report": ["report", "latest"],
           "log": ["log"], "recheck": ["recheck", "c:1"], "sweep": ["sweep", "s.toml"], "compare": ["compare", "a", "b"], "init": ["init"],
           "check": ["check"], "verdict": ["verdict", "good"]}


def test_every_command_is_a_module_whose_parser_calls_its_own_run_from_args():
    assert [m.__name__.rsplit(".", 1)[1] for m in commands.COMMANDS] == NAMES
    parser = cli.build_parser()
    for module in commands.COMMANDS:
        name = module.__name__.rsplit(".", 1)[1]
        assert callable(module.setup_arguments) and callable(module.run_from_args)
        args = parser.parse_args(MINIMAL[name])
        assert args.command == name and args.func is module.run_from_args


def test_help_lists_the_commands_in_order(capsys):
    code, _, err = main_in_process(capsys)
    assert code == 2
    listed = [l.split()[0] for l in err.splitlines() if l.startswith("    ") and l.split()[0] in NAMES]
    assert listed == NAMES


def _option(parser: argparse.ArgumentParser, command: list[str], flag: str) -> argparse.Action:
    sub = parser
    for word in command:
        (action,) = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        sub = action.choices[word]
    (opt,) = [a for a in sub._actions if flag in a.option_strings or a.dest == flag]
    return opt


@pytest.mark.parametrize("flag, where", [
    ("--max-trials", [["attribute"], ["bisect"]]),
    ("--resume", [["run"], ["attribute"], ["bisect"]]),
    ("--json", [["run"], ["attribute"], ["bisect"], ["patches", "list"], ["patches", "check"],
                ["patches", "capture"], ["gpu", "status"], ["gpu", "reset"]]),
    ("experiment", [["run"], ["attribute"], ["bisect"], ["patches", "list"], ["patches", "check"],
                    ["gpu", "status"], ["gpu", "reset"]]),
])
def test_a_shared_option_is_the_same_in_every_command(flag, where):
    parser = cli.build_parser()
    opts = [_option(parser, w, flag) for w in where]
    first = opts[0]
    for o in opts[1:]:
        assert (o.type, o.nargs, o.const, o.metavar, o.option_strings) == \
               (first.type, first.nargs, first.const, first.metavar, first.option_strings)
    if flag == "--max-trials":
        assert all(o.help == first.help and o.type is _options.positive_int for o in opts)
    if flag == "--json":
        assert {o.help for o in opts} == {_options.JSON_HELP}


def test_positive_int():
    assert _options.positive_int("3") == 3
    for bad, words in (("0", "positive"), ("-2", "positive"), ("x", "invalid int")):
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            _options.positive_int(bad)


def test_arm_words_gives_a_swallowed_experiment_file_back(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text("")
    args = cli.build_parser().parse_args(["run", "--patches", "all-minus", "slow", "NCCL_PROTO=LL", str(exp),
                                          "--patches", "none"])
    assert args.experiment is None          # argparse gave the file to --patches
    assert _options.arm_words(args.patches, args) == ["all-minus slow NCCL_PROTO=LL", "none"]
    assert args.experiment == str(exp)


def test_usage_error_is_one_line_exit_2(capsys):
    code, out, err = main_in_process(capsys, "run", "--repeat", "0")
    assert code == 2 and out == ""
    assert one_error_line(err) == ("bisect-lab: error: bisect-lab run: argument --repeat: "
                                   "expected a positive number, got 0")


def test_only_run_from_args_reads_args():
    """The plain functions take plain values: ``args`` appears in no other function of a command."""
    bad = []
    for module in commands.COMMANDS:
        tree = ast.parse(inspect.getsource(module))
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            if fn.name == "run_from_args":
                continue
            names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {a.arg for a in fn.args.args}
            if "args" in names:
                bad.append(f"{module.__name__}.{fn.name}")
    assert not bad, bad


def test_cli_keeps_its_public_names():
    assert cli.bundled_demo is commands.bundled_demo and cli.bundled_demo().is_file()
    assert isinstance(cli.build_parser(), argparse.ArgumentParser)


def test_an_arm_option_that_swallowed_only_the_experiment_file_is_a_usage_error(capsys, tmp_path):
    """`attribute --good exp.toml --bad all`: --good's one word is the experiment file, no arm is
    left: one line and exit 2 (it was an IndexError traceback)."""
    exp = tmp_path / "exp.toml"
    exp.write_text("")
    code, out, err = main_in_process(capsys, "attribute", "--good", str(exp), "--bad", "all")
    assert code == 2 and out == ""
    assert one_error_line(err).startswith("bisect-lab: error: --good names no arm (only the experiment file")
