"""`python -m strato`: the `strato` command, where its script is not on PATH."""

from strato.cli.main import main

if __name__ == "__main__":
    main()
