"""Bad input and storage trouble through the real CLI (issue 19): one line on stderr, the right exit code."""
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_cli_run import cli, one_line_error
from toyexp import make_toy


def test_nul_byte_in_env_is_a_config_error_not_a_failed_measurement(tmp_path):
    exp = make_toy(tmp_path, extra_toml='[env]\nTOY_KNOB = "a\\u0000b"\n')
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1")
    line = one_line_error(p, 2)
    assert "[env.TOY_KNOB]" in line and "NUL" in line


def test_typo_table_is_named_with_a_suggestion(tmp_path):
    exp = make_toy(tmp_path, extra_toml="[desing]\nrepeat = 1\n")
    line = one_line_error(cli(tmp_path, "run", exp, "--repeat", "1"), 2)
    assert "unknown table [desing]" in line and "did you mean [design]?" in line
