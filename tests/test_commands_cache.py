"""``cache [show] / prune`` in process, on a cache folder of the test's own."""
import json

import pytest

from test_commands_options import main_in_process, one_error_line

from bisect_lab.commands import Context, cache
from bisect_lab.errors import UsageError


def test_cache_json_of_an_empty_cache(capsys, tmp_path):
    code, out, err = main_in_process(capsys, "--cache", tmp_path / "c", "cache", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["root"] == str(tmp_path / "c")
    assert info["trees"] == [] and info["outputs"] == [] and info["total_bytes"] == 0


def test_show_and_prune_through_the_plain_functions(capsys, tmp_path):
    ctx = Context(cache=str(tmp_path / "c"))
    assert cache.show(ctx) == 0
    out = capsys.readouterr().out
    assert "0 repositories, 0 trees (0 B), {out} folders of 0 campaign(s) (0 trials, 0 B), 0 B in all" in out
    assert cache.prune(ctx, max_trees=0) == 0
    assert capsys.readouterr().out == f"removed 0 tree(s) from {tmp_path / 'c'}\n"
    assert cache.prune(Context(cache=str(tmp_path / "c"), json=True), everything=True) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_negative_keep_out_is_refused_before_anything_is_removed(capsys, tmp_path):
    with pytest.raises(UsageError, match="--keep-out must be 0 or more, not -1"):
        cache.prune(Context(cache=str(tmp_path / "c")), keep_out=-1)
    code, _, err = main_in_process(capsys, "--cache", tmp_path / "c", "cache", "prune", "--keep-out", "-1")
    assert code == 2 and one_error_line(err) == "bisect-lab: error: --keep-out must be 0 or more, not -1"


def test_size():
    assert [cache._size(n) for n in (None, 0, 1023, 1024, 5 * 1024 ** 3)] == ["-", "0 B", "1023 B", "1.0 KiB",
                                                                              "5.0 GiB"]
