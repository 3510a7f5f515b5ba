"""Every command's ``main``: one preamble, and how a command reports what went wrong.

``command(prog, parse, run, argv, usage)`` parses ``argv`` (``--help`` exits 0, a bad
flag is one line and exit code 2), calls ``run(args)`` and returns its exit code; an
error of ``usage`` raised while it runs (``ConfigError`` and those the command names:
a damaged input file, a value out of range) is one line on stderr and exit code 2,
never a traceback; an error of the file system (a disk full, a folder removed
meanwhile) one line and exit code 1. ``hand_over(module, argv, typed)`` runs another command
as this program (an old path whose work moved up to ``pipelines``); the command it runs
names itself ``program(PROG)``, so its usage and error lines name the program typed. Under mpirun / torchrun
only rank 0 prints, so P ranks do not repeat one mistake. ``Parser`` gives every flag its default in the help
and checked numbers: a bare ``type=float`` or ``type=int`` is ``finite_float`` /
``whole_number``, so a new flag refuses ``nan`` and ``inf`` by construction.

Imports: the standard library, ``cli.args`` and ``contracts.checks``.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Callable

from cli.args import finite_float, whole_number
from contracts.checks import ConfigError


def command(prog: str, parse: Callable[[list[str] | None], argparse.Namespace],
            run: Callable[[argparse.Namespace], int], argv: list[str] | None = None,
            usage: tuple[type[Exception], ...] = ()) -> int:
    """A command's ``main(argv)``: ``run(parse(argv))``, each way of failing as one line.

    ``parse`` is a parser's ``parse_args`` (or a function that also checks what the flags
    say together); ``usage``, the errors of the command's inputs besides ``ConfigError``
    (a damaged profile, schedule or record) that are the user's to mend: exit code 2."""
    try:
        args = parse(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return run(args)
    except (ConfigError, *usage) as e:
        return usage_error(prog, str(e))
    except OSError as e:
        return io_error(prog, e)


# while an old path hands its command line over: (the command run, the program typed)
_HANDED_OVER: list[tuple[str, str]] = []


def hand_over(module: str, argv: list | None = None, typed: str | None = None) -> int:
    """``python -m MODULE ARGV`` run as this program, importing nothing of it here (runpy:
    the old path of a command that moved keeps working); returns its exit code. ``typed``:
    the program the user typed, which ``MODULE``'s usage and error lines name
    (``program``)."""
    saved = sys.argv
    sys.argv = [module, *map(str, sys.argv[1:] if argv is None else argv)]
    _HANDED_OVER.append((f"python -m {module}", typed or f"python -m {module}"))
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        sys.argv = saved
        _HANDED_OVER.pop()
    return 0


def program(prog: str) -> str:
    """The name a command's usage and error lines give it: ``prog``, or the program the
    user typed where an old path handed its command line over to ``prog``."""
    return _HANDED_OVER[-1][1] if _HANDED_OVER and _HANDED_OVER[-1][0] == prog else prog


def launched_rank() -> int:
    """This process's rank as the launcher set it, before any MPI or torch init."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def usage_error(prog: str, message: str) -> int:
    if launched_rank() == 0:
        print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def io_error(prog: str, e: OSError) -> int:
    """An error of the file system while a command works (a disk full, a folder removed
    meanwhile): one line on stderr, exit code 1. Outputs are written whole or not at all
    (``contracts.files``), so what was there before stays."""
    if launched_rank() == 0:
        where = f"{e.filename}: " if e.filename else ""
        print(f"{prog}: error: {where}{e.strerror or e}", file=sys.stderr)
    return 1


def print_out(*lines: str) -> None:
    """Print lines to stdout; a reader that stopped reading (``| head``) is no error.

    Commands write their files before they print, so the files are complete either way.
    """
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each flag's default at the end of its help, once, written as a user types it.

    No default is shown where there is none (``None``, a switch's ``False``) or
    where the help already says what it is; a list reads ``a,b``, as typed.
    """

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (default in (None, False, argparse.SUPPRESS) or "default" in text
                or action.option_strings == [] or isinstance(default, bool)):
            return text
        if isinstance(default, (list, tuple)):
            default = ",".join(map(str, default))
        return f"{text} (default: {default})" if text else f"(default: {default})"


class Parser(argparse.ArgumentParser):
    """argparse with defaults in the help, one-line errors, and checked numbers:
    ``type=float`` means a finite float and ``type=int`` a whole number."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        # argparse looks a flag's type up in this registry when it converts a value:
        # a bare float or int (in this parser, its groups and subparsers) is checked.
        self.register("type", float, finite_float)
        self.register("type", int, whole_number)

    def error(self, message):
        sys.exit(usage_error(self.prog, " ".join(message.split())
                             + f" (see {self.prog} --help)"))
