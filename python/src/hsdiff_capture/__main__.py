"""`python -m hsdiff_capture …` is the `hsdiff-capture` command."""

from .cli import main

main()
