"""`python -m engine experts` refuses bad input with one line and status 2, before any engine
is built."""

from __future__ import annotations

import pytest

from engine.cli.main import main


@pytest.mark.parametrize("argv, says", [
    (["experts", "--preset", "nope"], "unknown preset 'nope'"),
    (["experts", "--dense", "nope"], "unknown preset 'nope'"),
    (["experts", "--batch-sizes", "0"], "batch size"),
    (["experts", "--new-tokens", "2"], "new tokens must be at least"),
])
def test_bad_input_is_one_line_and_status_2(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err
