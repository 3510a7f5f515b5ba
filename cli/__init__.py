"""Command-line conventions shared by every ``python -m`` entry point.

* ``commands``: ``command``, the one preamble of every ``main`` (parse, run, a usage
  error as one line and exit code 2 without a traceback, a file-system error as one line
  and exit code 1), ``hand_over`` (an old path runs the command that moved), ``program``
  (the name a handed-over command gives itself: the one typed), ``Parser`` (defaults in
  the help, checked numbers) and ``print_out``;
* ``args``: the argparse types of numbers, units, names and paths;
* ``workers``: how ``--workers`` is parsed;
* ``stages``: a validation's stages run as commands, with their logs.

Each name is handed on here, so a command writes ``cli.positive_int`` or
``cli.command(...)``.

Imports: ``cli``'s modules (the standard library and ``contracts``).
"""
from __future__ import annotations

from cli.commands import (  # noqa: F401
    command, hand_over, program, launched_rank, usage_error, io_error, print_out,
    HelpFormatter, Parser
)

from cli.args import (  # noqa: F401
    MAX_COUNT, MAX_SEED, whole_number, int_in, positive_int, nonnegative_int, seed,
    finite_float, accuracy, positive_float, nonnegative_float, float_in, add_sgd_flags,
    int_list, bandwidth, duration, run_id, cluster_prefix, output_folder, output_file,
    input_file, input_path, input_folder, choice_list, number_list
)

from cli.workers import (  # noqa: F401
    workers_flag, MAX_WORKERS, WORKERS_HELP, worker_counts, worker_counts_up_to,
    ONE_WORKER_HELP, one_worker_count
)

from cli.stages import (  # noqa: F401
    run_stage, last_line
)
