"""What the CLI prints of names people typed: control characters as escapes, never raw, and
tables whose rows stay one aligned line each."""

from __future__ import annotations

import pytest

from tunescope.cli._format import printable, table


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("evil\x1b[2J\nname", "evil\\x1b[2J\\nname"),
        ("a\tb\rc\x07d\x7f\x00", "a\\tb\\rc\\x07d\\x7f\\x00"),
        ("\x9b31m", "\\x9b31m"),  # the one-byte CSI of 8-bit terminals
        ("abc\u202edef", "abc\\u202edef"),  # right-to-left override
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lr=3e-4, café — naïve ü 学习", "lr=3e-4, café — naïve ü 学习"),
        ("C:\\runs\\x1b", "C:\\runs\\x1b"),  # already harmless text is left alone
    ],
)
def test_printable_escapes_what_a_terminal_would_act_on(name: str, shown: str) -> None:
    assert printable(name) == shown
    assert printable(name).isprintable()


def test_a_table_row_stays_one_aligned_line_whatever_its_cells_hold() -> None:
    out = table(
        ["name", "steps", "params"],
        [["evil\x1b[2J\nname", "12", "a=1"], ["tab\tbed", "3", "note=x\ny"]],
    )
    assert out.split("\n") == [
        "name               steps  params",
        "-----------------  -----  ---------",
        "evil\\x1b[2J\\nname     12  a=1",
        "tab\\tbed               3  note=x\\ny",
    ]
    assert out.replace("\n", "").isprintable()
