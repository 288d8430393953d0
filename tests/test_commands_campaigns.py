"""``run``, ``attribute`` and ``bisect`` in process, on the toy target: the arms their
``run_from_args`` hands on, their session closing on an interrupt, and their one-line errors."""
import json
import sqlite3

import pytest

from test_commands_options import main_in_process, one_error_line
from toyexp import make_toy

from bisect_lab.commands import Context, _session, run
from bisect_lab.commands._context import experiment_or_demo


@pytest.fixture
def toy(tmp_path):
    return make_toy(tmp_path)


def _ctx(tmp_path, **kw):
    return Context(results=str(tmp_path / "res"), cache=str(tmp_path / "cache"), **kw)


def test_one_arm_alone_is_measured_against_all(capsys, tmp_path, toy):
    assert run.run(_ctx(tmp_path, json=True), str(toy), ["none"], repeat=1) == 0
    res = json.loads(capsys.readouterr().out)
    assert sorted(a["arm"] for a in res["arms"]) == ["all", "none"]
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        assert db.execute("SELECT count(*) FROM trials WHERE campaign=?", (res["campaign"],)).fetchone() == (2,)


def test_run_from_argv_with_the_experiment_swallowed_by_patches(capsys, tmp_path, toy):
    code, out, err = main_in_process(capsys, "--results", tmp_path / "res", "--cache", tmp_path / "cache",
                                     "run", "--patches", "all", toy, "--repeat", "1", "--json")
    assert code == 0, err
    assert [a["arm"] for a in json.loads(out)["arms"]] == ["all"]


def test_an_interrupt_closes_the_session_and_exits_130(capsys, tmp_path, toy):
    exp = experiment_or_demo(str(toy))
    seen = []

    def body(session):
        seen.append(session)
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        _session.with_session(_ctx(tmp_path), exp, body)
    assert e.value.code == 130
    assert capsys.readouterr().err.endswith("interrupted\n")
    with pytest.raises(sqlite3.ProgrammingError):      # the store was closed
        seen[0].store._db.execute("SELECT 1")


@pytest.mark.parametrize("argv, words", [
    (["attribute", "{toy}", "--good", "none", "--bad", "nosuch"], "bad arm spec 'nosuch'"),
    (["bisect", "{toy}", "--good", "HEAD", "--bad", "HEAD", "--patches", "nosuch"], "bad arm spec 'nosuch'"),
    (["attribute", "{toy}", "--good", "none"], "the following arguments are required: --bad"),
    (["bisect", "{toy}", "--good", "a", "--bad", "b", "--max-trials", "0"], "expected a positive number, got 0"),
])
def test_campaign_commands_give_one_line_exit_2(capsys, tmp_path, toy, argv, words):
    argv = [a.replace("{toy}", str(toy)) for a in argv]
    code, out, err = main_in_process(capsys, "--results", tmp_path / "res", "--cache", tmp_path / "cache", *argv)
    assert code == 2 and out == ""
    assert words in one_error_line(err)
