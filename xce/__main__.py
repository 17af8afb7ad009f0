"""`python -m xce` runs the same CLI as the `xce` executable."""

from xce.cli.main import run

if __name__ == "__main__":
    run()
