"""Command line: ``lmmsim run | validate | workload | list | plot | sweep | search | ...``.

This module holds :func:`main` and its exit codes; the argparse tree is in :mod:`lmmsim.cli.parser`, and
the commands in :mod:`lmmsim.cli.run` (one scenario), :mod:`lmmsim.cli.experiments` (sweeps, paper
reproductions, configuration search) and :mod:`lmmsim.cli.calibrate` (profiling and cost-model fits).

Any :class:`~lmmsim.errors.UserError` becomes one line on stderr and exit
code 2; nothing a user can get wrong prints a traceback.
"""

from __future__ import annotations

import os
import sys

from lmmsim.cli.parser import build_parser
from lmmsim.cli.summary import print_summary
from lmmsim.errors import StuckRunError, UserError

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_STUCK_RUN", "EXIT_USER_ERROR", "build_parser", "main", "print_summary"]

EXIT_USER_ERROR = 2
EXIT_STUCK_RUN = 3  # the simulation deadlocked: requests left that no event can ever move
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a Unix tool whose reader closed the pipe


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as err:
        print(f"lmmsim: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except StuckRunError as err:
        print(f"lmmsim: error: run stuck: {err}", file=sys.stderr)
        return EXIT_STUCK_RUN
    except BrokenPipeError:  # the reader went away (`lmmsim list models | head`): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush at exit
        return EXIT_BROKEN_PIPE
    except OSError as err:  # unwritable output folder, disk full, ...
        where = err.filename or "lmmsim"
        print(f"lmmsim: error: {where}: {err.strerror or err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("lmmsim: interrupted", file=sys.stderr)
        return 130
