"""The Rich consoles the commands print through.

Rich sizes a console from the terminal or from $COLUMNS, and falls back to 80
columns when the output goes to a pipe or a file (`make demo | tee demo.log`,
`strato schedule ... > out`): tables of UUIDs, locations and reasons then fold
over several lines each. Output that is not a terminal gets PIPE_WIDTH columns
instead, unless $COLUMNS says otherwise.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPE_WIDTH = 160


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr), PIPE_WIDTH wide when it is not a terminal."""
    c = Console(stderr=stderr)
    # $COLUMNS is the terminal's width as the user's shell reports it, read here
    # only to let it win over PIPE_WIDTH; Rich reads it the same way.
    if not c.is_terminal and not os.environ.get("COLUMNS"):
        c.width = PIPE_WIDTH
    return c
