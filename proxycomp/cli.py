"""The `proxycomp` command: dispatches to the subcommand modules."""
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    raise SystemExit("proxycomp: no subcommands yet")
