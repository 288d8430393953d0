"""Default locations: results beside the experiment, never inside the target repository, the
same from every folder; explicit choices win."""
from pathlib import Path

from bisect_lab.paths import demo_results_dir, redirected_results_dir, remember_results_dir, results_dir


def test_results_follow_the_experiment_never_inside_the_target(tmp_path, monkeypatch):
    monkeypatch.delenv("BISECT_LAB_RESULTS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    target = tmp_path / "repo"
    (target / "sub").mkdir(parents=True)
    exp = tmp_path / "exps" / "e.toml"
    # beside the experiment, whichever folder the command runs from
    for cwd in (tmp_path, target / "sub", Path("/")):
        d, note = results_dir(experiment=exp, target_repo=str(target), cwd=cwd)
        assert d == tmp_path / "exps" / "results" and str(d) in note and "--results" in note
    # an experiment file inside its target: the user data dir, keyed by the target
    inside, note = results_dir(experiment=target / "sub" / "e.toml", target_repo=str(target), cwd=tmp_path)
    assert inside == redirected_results_dir(target) and inside.is_relative_to(tmp_path / "data")
    assert str(inside) in note and "never" in note
    # a URL target has no folder to stay out of
    assert results_dir(experiment=exp, target_repo="https://example.invalid/x.git")[0] == exp.parent / "results"
    # the bundled demo: the user data dir, not the installation
    assert results_dir(experiment=exp, target_repo=str(target), demo=True)[0] == demo_results_dir()
    # commands without an experiment: ./results with a database, a target's folder, the last campaign's
    assert results_dir(cwd=target / "sub")[0] == Path("results")
    inside.mkdir(parents=True)
    assert results_dir(cwd=target / "sub")[0] == inside
    assert results_dir(cwd=tmp_path)[0] == Path("results")
    (exp.parent / "results").mkdir(parents=True)
    (exp.parent / "results" / "bisect-lab.sqlite").write_bytes(b"")
    remember_results_dir(exp.parent / "results")
    assert results_dir(cwd=tmp_path)[0] == exp.parent / "results"
    assert results_dir(cwd=exp.parent)[0] == Path("results")           # ./results of that folder itself
    # explicit choices: no redirection, and the line says which
    d, note = results_dir(tmp_path / "x", experiment=exp, target_repo=str(target), cwd=target)
    assert d == tmp_path / "x" and "--results" in note
    monkeypatch.setenv("BISECT_LAB_RESULTS", str(tmp_path / "env"))
    d, note = results_dir(experiment=exp, target_repo=str(target), cwd=target)
    assert d == tmp_path / "env" and "BISECT_LAB_RESULTS" in note
