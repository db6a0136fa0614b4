"""What every verb shares: its parser, and bad input ended as one line on stderr with exit status 2.

A floor module (it imports only the floor), so the gym may build its verb on it; the `proxycomp` dispatcher
(`proxycomp/cli.py`) runs every verb through `run_command`, and nothing in the package imports the dispatcher.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection
from pathlib import Path

from proxycomp.errors import UserError
from proxycomp.files import no_room, no_room_message


def command_parser(prog: str, description: str):
    """The parser every non-Lightning verb builds on: errors raise instead of exiting, no abbreviated flags."""
    from jsonargparse import ArgumentParser

    return ArgumentParser(prog=prog, description=description, exit_on_error=False, allow_abbrev=False)


def run_command(verb: str, main: Callable[[list[str]], int], argv: list[str], subcommands: Collection[str] = ()) -> int:
    """`main(argv)`'s exit status; a `UserError` or a parse error ends as `proxycomp VERB [SUBCOMMAND]: error: ...`
    on one line of stderr and status 2, never a traceback (`subcommands`: the first words the error names)."""
    command = f"{verb} {argv[0]}" if argv and argv[0] in subcommands else verb
    from jsonargparse import ArgumentError

    try:
        return main(argv)
    except SystemExit as done:  # --help, --print_config
        return done.code or 0
    except BrokenPipeError:  # the reader went away (`proxycomp gym tasks | head`)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - nothing may be flushed into the closed pipe at exit
        return 0
    except (UserError, ArgumentError) as err:
        message = _name_the_config(" ".join(str(err).split()), argv)  # one line, whatever the library put in it
    except Exception as err:  # a write that is not atomic_path's (a logger's): the library's words rarely say why
        full = no_room(err)
        if full is None:
            raise
        message = no_room_message(full)
    print(f"proxycomp {command}: error: {message}", file=sys.stderr)
    return 2


def _name_the_config(message: str, argv: list[str]) -> str:
    """jsonargparse parses a config file's text, so its YAML syntax errors name "<unicode string>": the first file
    given with --config that YAML cannot read is named instead."""
    unnamed = '"<unicode string>"'
    if unnamed not in message:
        return message
    import yaml

    files = [value for flag, value in zip(argv, argv[1:]) if flag == "--config"]
    files += [arg.removeprefix("--config=") for arg in argv if arg.startswith("--config=")]
    for path in files:
        try:
            yaml.safe_load(Path(path).read_text())
        except yaml.YAMLError:
            return message.replace(unnamed, path)
        except OSError:
            continue
    return message
