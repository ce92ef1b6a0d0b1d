"""The command line, `python -m engine info | generate | sweep | run` (engine/__main__.py runs
cli.main): main holds the commands, run the `run` command, common what they share."""
