"""`python -m strato`: the `strato` command, where its script is not on PATH.

Also the `strato` script's entry point: it imports the command here, so that
a Ctrl-C while the command's modules load (a second or two) ends in one line
and exit 130, not a traceback of whatever was being imported."""

import sys


def main() -> None:
    try:
        from strato.cli.main import main as command
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    command()


if __name__ == "__main__":
    main()
