"""``gpu``, ``diff``, ``report`` and ``sweep`` in process: their plain functions and their errors."""
import json

import pytest

from test_commands_options import main_in_process, one_error_line

from bisect_lab.commands import Context, diff, gpu, report, sweep
from bisect_lab.errors import BisectLabError


def test_gpu_status_json_on_this_machine(capsys, tmp_path):
    assert gpu.run(Context(cache=str(tmp_path / "c"), json=True), "status") == 0
    (name, snap), = json.loads(capsys.readouterr().out).items()
    assert name == snap["host"] == "local"
    assert isinstance(snap["gpus"], list) and "taken_at" in snap


def test_gpu_without_an_action_is_a_usage_error(capsys):
    code, _, err = main_in_process(capsys, "gpu")
    assert code == 2 and one_error_line(err).endswith("bisect-lab gpu: the following arguments are required: action")


@pytest.mark.parametrize("module, argv", [(diff, ["diff", "a", "b"]), (report, ["report", "latest"])])
def test_reading_commands_without_results_say_so(capsys, tmp_path, module, argv):
    ctx = Context(results=str(tmp_path / "res"))
    with pytest.raises(BisectLabError, match="no results database at"):
        module.run(ctx, *argv[1:])
    code, out, err = main_in_process(capsys, "--results", tmp_path / "res", *argv)
    assert code == 2 and out == ""
    assert one_error_line(err) == f"bisect-lab: error: no results database at {tmp_path / 'res' / 'bisect-lab.sqlite'}"
    assert not (tmp_path / "res").exists()      # read-only commands create nothing


def test_report_format_is_checked_by_the_parser(capsys):
    code, _, err = main_in_process(capsys, "report", "latest", "--format", "pdf")
    assert code == 2 and "argument --format: invalid choice: 'pdf'" in one_error_line(err)


def test_sweep_of_a_missing_file(capsys, tmp_path):
    code, out, err = main_in_process(capsys, "--results", tmp_path / "res", "sweep", tmp_path / "nope.toml")
    assert code == 2 and out == ""
    assert one_error_line(err) == f"bisect-lab: error: {tmp_path / 'nope.toml'}: sweep file not found"
