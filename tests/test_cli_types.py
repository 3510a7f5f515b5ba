"""Every command takes its values through the shared checked types: a new flag gets them too.

Read from each command's parser (nothing runs): every parser is a
``cli.Parser`` (a bare ``type=float`` or ``int`` is then checked:
finite, whole); a flag with a numeric default converts with a type (never as
raw text); a flag that names a file or folder is checked by one of the path
types (``output_folder``, ``output_file``, ``input_file``, ``input_folder``).
"""
from __future__ import annotations

import argparse

import pytest

import cli

PATH_TYPES = {"output_folder", "output_file", "input_file", "input_folder"}
PATH_DESTS = {"out", "workdir", "runs", "profile", "cluster", "link", "data_dir",
              "progress_file", "trace", "figure", "show", "sweeps"}


def parsers():
    from calibrate import __main__ as calibrate
    from calibrate.fits import fit
    from calibrate.probes import link, probe, sched_probe, workload
    from real.training import replay as real_replay
    from real.launch import sweep, train
    from real.cluster import __main__ as cluster
    from simulator import (
        bench,
        compare,
        fit_timings,
        pool,
        predict,
    )

    from pipelines import replay, validate, validate_accuracy, validate_cluster
    found = {"real.train": train.build_parser(), "real.sweep": sweep.build_parser(),
             "real.cluster": cluster._parser(), "calibrate": calibrate.build_parser(),
             "calibrate.probe": probe.build_parser(), "calibrate.fit": fit.build_parser(),
             "calibrate.link": link.build_parser(),
             "calibrate.sched_probe": sched_probe.build_parser(),
             "simulator.predict": predict.build_parser(),
             "simulator.compare": compare.build_parser(), "simulator.pool": pool.build_parser(),
             "pipelines.validate": validate.build_parser(),
             "pipelines.validate_cluster": validate_cluster.build_parser(),
             "simulator.bench": bench.build_parser(),
             "simulator.fit_timings": fit_timings.build_parser(),
             "pipelines.replay": replay.build_parser(),
             "pipelines.validate_accuracy": validate_accuracy.build_parser(),
             "calibrate.workload": workload.build_parser(),
             "real.replay": real_replay.build_parser()}
    for name, p in list(found.items()):         # subcommands (real.cluster up, ...)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.update({f"{name} {sub}": sp for sub, sp in action.choices.items()})
    return found


PARSERS = parsers()


def flags(parser):
    for a in parser._actions:
        if a.help == argparse.SUPPRESS or isinstance(
                a, (argparse._HelpAction, argparse._StoreTrueAction, argparse._StoreFalseAction,
                    argparse._SubParsersAction, argparse._VersionAction)):
            continue
        yield a


@pytest.mark.parametrize("name", list(PARSERS))
def test_every_parser_checks_bare_numbers(name):
    p = PARSERS[name]
    assert isinstance(p, cli.Parser), f"{name} does not use cli.Parser"
    assert p._registry_get("type", float, None) is cli.finite_float
    assert p._registry_get("type", int, None) is cli.whole_number


@pytest.mark.parametrize("name", list(PARSERS))
def test_numbers_and_paths_go_through_checked_types(name):
    for a in flags(PARSERS[name]):
        kind = getattr(a.type, "__name__", "")
        number = isinstance(a.default, (int, float)) and not isinstance(a.default, bool)
        if number:
            assert a.type is not None and a.type is not str, f"{name} {a.option_strings}"
        if a.dest in PATH_DESTS:
            assert kind in PATH_TYPES, f"{name} {a.option_strings or a.dest}: {kind or None}"


def test_the_types_refuse_what_they_should(tmp_path):
    bad = [(cli.finite_float, "nan"), (cli.finite_float, "-inf"), (cli.positive_float, "0"),
           (cli.whole_number, "1.5"), (cli.positive_int, str(2**40)), (cli.seed, "-1"),
           (cli.float_in(0, 1, high_open=True), "1"), (cli.int_list(1, 4), "1,,5"),
           (cli.run_id, "../x"), (cli.run_id, ".x"), (cli.run_id, "a/b"),
           (cli.bandwidth, "1e999gbit"), (cli.duration, "inf"),
           (cli.output_folder, str(tmp_path / "f")), (cli.input_file, str(tmp_path)),
           (cli.input_folder, str(tmp_path / "none")), (cli.output_file(".json"), "x.txt"),
           (cli.cluster_prefix, "Psgd")]
    (tmp_path / "f").write_text("x")
    for kind, text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)


SCHEME_COMMANDS = ("real.train", "real.sweep", "simulator.predict", "pipelines.replay",
                   "pipelines.validate", "pipelines.validate_cluster",
                   "pipelines.validate_accuracy")
AVERAGING_COMMANDS = ("real.train", "simulator.predict", "pipelines.replay")


def options(parser) -> dict:
    return {o: a for a in parser._actions for o in a.option_strings}


def test_one_flag_vocabulary_across_commands():
    """``--schemes`` (old name ``--algorithm``), ``--average-every`` (old name
    ``--avg-every``) and one ``--workers`` syntax wherever a command takes them."""
    for name in SCHEME_COMMANDS:
        opts = options(PARSERS[name])
        assert opts["--schemes"] is opts["--algorithm"], name
    for name in AVERAGING_COMMANDS:
        opts = options(PARSERS[name])
        assert opts["--average-every"] is opts["--avg-every"], name
    for name, parser in PARSERS.items():
        opts = options(parser)
        assert "--avg-every" not in opts or "--average-every" in opts, name
        if "--workers" in opts:
            kind = getattr(opts["--workers"].type, "__name__", "")
            assert kind in ("worker_counts", "one_worker_count"), f"{name}: {kind}"


def test_one_p_commands_read_the_shared_syntax():
    one = cli.one_worker_count(1, 64)
    assert one("8") == one("8-8") == one("2^3..3") == one("8,8") == 8
    for text in ("1-4", "1,8", "2^0..3", "0", "65", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            one(text)
    probe = options(PARSERS["calibrate.probe"])["--workers"].type
    assert probe("4") == [2, 3, 4] and probe("2^0..2") == [2, 4]
    with pytest.raises(argparse.ArgumentTypeError):
        probe("1")
