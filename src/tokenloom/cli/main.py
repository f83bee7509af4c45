"""Entry point of the ``tokenloom`` command line.

Each subcommand lives in its own module under :mod:`tokenloom.cli` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import TokenloomError

# (module name under tokenloom.cli) in the order they appear in --help
_SUBCOMMAND_MODULES = (
    "demo",
    "preprocess",
    "inspect",
    "preview",
    "merge",
    "build_sequences_per_dataset",
    "prepare_cache",
    "plan",
    "trace",
    "warmup",
)

_DESCRIPTION = """\
tokenloom: Megatron-compatible data for training GPT-style models, without Megatron.

Typical flow:
  tokenloom demo                                   # see everything work on real text
  tokenloom preprocess --input 'data/*.jsonl.zst' --output-prefix out/web \\
      --tokenizer hf:tokenizer.json --json-keys text --append-eod
  tokenloom inspect out/web_text_document          # header, counts, integrity check
  tokenloom prepare-cache --config train.json      # build index caches offline
"""


def _installed_version() -> str:
    """The version from the installed package's metadata (the source's own as a fallback)."""
    from importlib import metadata

    try:
        return metadata.version("tokenloom")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        from tokenloom._version import __version__

        return f"{__version__} (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``tokenloom`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="tokenloom",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tokenloom {_installed_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(f"tokenloom.cli.{name}")
        except ModuleNotFoundError as error:
            if error.name == f"tokenloom.cli.{name}":
                continue
            raise
        module.register(subparsers)
    return parser


def describe_os_error(error: OSError) -> str:
    """One line for an OSError that always names the file when the error knows it."""
    text = error.strerror or str(error)
    paths = [p for p in (error.filename, read_attribute(error, "filename2", None)) if p is not None]
    if isinstance(error, TokenloomError) or not paths:
        return str(error)
    return f"{' -> '.join(os.fsdecode(p) for p in paths)}: {text}"


def stdout_is_closed() -> bool:
    """Whether stdout is a pipe whose reader went away (``tokenloom ... | head``)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (captured), no poll
        return False


def _quiet_after_closed_stdout() -> int:
    """What a Unix tool does when its reader stops: exit at once, silently, with the
    status a SIGPIPE death gives (141); stdout is pointed at /dev/null so that the final
    flush at exit cannot print Python's "Exception ignored ... BrokenPipeError"."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError as error:
        if stdout_is_closed():
            return _quiet_after_closed_stdout()
        print(f"tokenloom {args.command}: error: {describe_os_error(error)}", file=sys.stderr)
        return 1
    except TokenloomError as error:
        print(f"tokenloom {args.command}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # disk full, unwritable output directory, ... : no traceback
        print(f"tokenloom {args.command}: error: {describe_os_error(error)}", file=sys.stderr)
        return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; every tokenloom error (and OSError) is one line on stderr,
    exit 1; Ctrl-C is one line, exit 130; never a traceback for those."""
    command = "command"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = read_attribute(args, "command", None) or command
        if not read_attribute(args, "func", None):
            parser.print_help()
            return 2
        return _run(args)
    except KeyboardInterrupt:
        print(f"tokenloom {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
