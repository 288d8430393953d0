"""A benchmark's last line in a one-line message: escapes out, never a dangling colon."""
from bisect_lab.terminal_text import last_line, printable
from bisect_lab.trial import _one_line


def test_a_last_line_of_only_escapes_gives_the_line_before_it():
    out = "loading\n\x1b[31mOOM while capturing graphs\x1b[0m\n\x1b[0m\x1b[?25h\n"
    assert last_line(out) == "OOM while capturing graphs"
    assert _one_line(out) == "OOM while capturing graphs"      # what a failed trial's error quotes
    assert _one_line("\x1b[0m\n\r\n") == ""                    # then the message adds nothing


def test_printable_drops_control_characters_and_a_trailing_colon():
    assert printable("error:\x07 ") == "error"
    assert printable("a\x01b\tc") == "ab\tc"      # tabs stay
