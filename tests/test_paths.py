"""Default locations: results never inside the target repository; explicit choices win."""
from pathlib import Path

from bisect_lab.paths import redirected_results_dir, results_dir


def test_results_default_outside_and_inside_the_target(tmp_path, monkeypatch):
    monkeypatch.delenv("BISECT_LAB_RESULTS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    target = tmp_path / "repo"
    (target / "sub").mkdir(parents=True)
    assert results_dir(target_repo=str(target), cwd=tmp_path)[0] == Path("results")
    inside, note = results_dir(target_repo=str(target), cwd=target / "sub")
    assert inside == redirected_results_dir(target) and inside.is_relative_to(tmp_path / "data")
    assert str(inside) in note and "--results" in note
    # a URL target has no folder to stay out of
    assert results_dir(target_repo="https://example.invalid/x.git", cwd=target)[0] == Path("results")
    # report/diff (no experiment) find the redirected folder again from inside the target, once it exists
    assert results_dir(cwd=target / "sub")[0] == Path("results")
    inside.mkdir(parents=True)
    assert results_dir(cwd=target / "sub")[0] == inside
    assert results_dir(cwd=tmp_path)[0] == Path("results")
    # explicit choices: no note, no redirection
    assert results_dir(tmp_path / "x", target_repo=str(target), cwd=target) == (tmp_path / "x", None)
    monkeypatch.setenv("BISECT_LAB_RESULTS", str(tmp_path / "env"))
    assert results_dir(target_repo=str(target), cwd=target) == (tmp_path / "env", None)
