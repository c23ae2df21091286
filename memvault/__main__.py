"""`python -m memvault …` runs the same command line as `memvault …`."""

from memvault.cli.main import cli

if __name__ == "__main__":
    cli(prog_name="memvault")
