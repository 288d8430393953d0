"""``patches list / check / capture`` in process: the command module's own functions."""
import json

from gitrepos import dirty_checkout_with_stash, snapshot
from test_commands_options import main_in_process, one_error_line
from toyexp import make_toy

from bisect_lab.commands import Context, bundled_demo, patches
from bisect_lab.config import load_experiment


def test_patches_list_json_of_the_bundled_demo(capsys, tmp_path):
    code, out, err = main_in_process(capsys, "--cache", tmp_path / "c", "patches", "list", "--json")
    assert code == 0, err
    rows = json.loads(out)
    ps = load_experiment(bundled_demo()).patchset
    assert [r["name"] for r in rows] == [p.name for p in ps.patches]
    assert [r["aliases"] for r in rows] == [list(p.aliases) for p in ps.patches]
    assert set(rows[0]) == {"name", "aliases", "required", "requires", "files", "added", "removed", "description"}


def test_list_and_check_through_the_plain_function(capsys, tmp_path):
    exp = make_toy(tmp_path)
    assert patches.run(Context(json=True), "list", str(exp)) == 0
    assert {r["name"] for r in json.loads(capsys.readouterr().out)} == {"slow", "noop", "gated", "fast"}
    assert patches.run(Context(cache=str(tmp_path / "c")), "check", str(exp)) == 0
    assert "4 patches checked" in capsys.readouterr().out


def test_check_of_a_conflicting_pair_is_one_line_exit_2(capsys, tmp_path):
    exp = make_toy(tmp_path, conflict=True)
    code, out, err = main_in_process(capsys, "--cache", tmp_path / "c", "patches", "check", exp)
    assert code == 2
    assert one_error_line(err).startswith("bisect-lab: error: patch check failed: ")


def test_capture_json_leaves_the_checkout_as_it_was(capsys, tmp_path):
    repo = dirty_checkout_with_stash(tmp_path / "user")
    before = snapshot(repo.path)
    assert patches.capture(Context(json=True), str(repo.path), str(tmp_path / "ps")) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["patches"] and res["out"] == str(tmp_path / "ps")
    assert snapshot(repo.path) == before and (tmp_path / "ps" / "patchset.toml").is_file()


def test_patches_without_an_action_is_a_usage_error(capsys):
    code, _, err = main_in_process(capsys, "patches")
    assert code == 2
    assert one_error_line(err) == "bisect-lab: error: bisect-lab patches: the following arguments are required: action"
