"""The `agentrl-lite` command (also `python -m agentrl_lite`).

agentrl-lite course [--profile auto] [--notebooks notebooks] [--only GLOB] [--out runs]
    run every lesson into runs/<UTC timestamp>/ with report.md; exit 1 if a notebook failed
agentrl-lite exercises [--check] [--solutions solutions] [--exercises exercises]
    regenerate exercises/ from solutions/; with --check change nothing, exit 1 if any is stale
agentrl-lite strip [--check] PATH... (a notebook or a folder of them)
    store notebooks clean (no outputs, execution counts or run metadata; nbformat's layout); with --check change
    nothing, exit 1 if any is not
agentrl-lite data [--out data]
    regenerate the task files under data/ (deterministic, from fixed seeds)
agentrl-lite docs [--check]
    render the generated tables of README.md and docs/results.md from results/; with --check change nothing,
    exit 1 if stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _course(args: argparse.Namespace) -> int:
    from agentrl_lite.course.course_runs import failed_notebooks, run_course

    try:
        run_dir = run_course(args.notebooks, profile=args.profile, out_root=args.out, only=args.only)
    except FileNotFoundError as exc:
        print(exc)
        return 2
    failed = failed_notebooks(run_dir)
    print(f"Report: {run_dir / 'report.md'}")
    if failed:
        print(
            f"{len(failed)} notebook(s) failed: {', '.join(failed)} (executed copies with tracebacks in {run_dir})"
        )
        return 1
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from agentrl_lite.course.reproduce import LESSONS, parse_parameter, reproduce, resummarise

    if args.lesson not in LESSONS:
        print(f"lesson {args.lesson} cannot be reproduced yet; choose one of {', '.join(sorted(LESSONS))}")
        return 2
    try:
        parameters = dict(parse_parameter(text) for text in args.set)
    except ValueError as exc:
        print(exc)
        return 2
    if args.from_run:
        print(f"Summary: {resummarise(args.lesson, args.from_run, parameters)}")
        return 0
    try:
        run_dir, path = reproduce(args.lesson, args.seeds, profile=args.profile, out_root=args.out,
                                  parameters=parameters)
    except (RuntimeError, ValueError) as exc:
        print(exc)
        return 1
    print(f"Runs: {run_dir}\nSummary: {path}")
    return 0


def _exercises(args: argparse.Namespace) -> int:
    from agentrl_lite.course.exercises import build_exercises

    if not Path(args.solutions).is_dir():
        print(f"No solutions folder at {args.solutions}: run from the repository root or pass --solutions")
        return 2
    paths = build_exercises(args.solutions, args.exercises, check=args.check)
    if args.check:
        for path in paths:
            print(f"stale: {path}")
        if paths:
            print(
                "Exercises are out of date with their solutions: run `agentrl-lite exercises` and commit the result"
            )
            return 1
        print("Exercises are up to date.")
        return 0
    for path in paths:
        print(f"wrote: {path}")
    print(f"{len(paths)} exercise notebook(s) changed.")
    return 0


def _strip(args: argparse.Namespace) -> int:
    from agentrl_lite.course.exercises import strip_outputs

    paths = [notebook for path in map(Path, args.paths)  # a folder: the notebooks in it
             for notebook in (sorted(path.glob("*.ipynb")) if path.is_dir() else [path])]
    dirty = [path for path in paths if strip_outputs(path, dry_run=args.check)]
    for path in dirty:
        print(f"{'not stored clean' if args.check else 'stripped'}: {path}")
    if args.check and dirty:
        print("Store notebooks without outputs, execution counts or run metadata, in nbformat's layout: "
              "run `agentrl-lite strip` on them")
        return 1
    return 0


def _docs(args: argparse.Namespace) -> int:
    from agentrl_lite.course.docs import update_docs

    stale = update_docs(check=args.check)
    if args.check and stale:
        print(f"{', '.join(stale)}: the generated tables differ from results/: run `agentrl-lite docs` and commit")
        return 1
    print(f"rendered from results/: {', '.join(stale)}" if stale else "The generated tables are up to date.")
    return 0


def _data(args: argparse.Namespace) -> int:
    from agentrl_lite.course.data import build_all

    for path in build_all(args.out) if args.out else build_all():
        print(f"wrote: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrl-lite", description="Run the agentrl_lite course and manage its notebooks."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    course = sub.add_parser(
        "course", help="execute every lesson notebook and write runs/<timestamp>/report.md"
    )
    course.add_argument(
        "--profile",
        default="auto",
        choices=["auto", "smoke", "cpu", "gpu"],
        help="smoke: CI-sized; cpu: a laptop; gpu: one GPU; auto: gpu when CUDA is available, else cpu",
    )
    course.add_argument(
        "--notebooks", default="notebooks", help="folder of the notebooks to run (default: notebooks)"
    )
    course.add_argument(
        "--only", default=None, metavar="GLOB", help="run only notebooks whose file name matches, e.g. '03_*'"
    )
    course.add_argument("--out", default="runs", help="folder that receives the run folder (default: runs)")
    course.set_defaults(func=_course)

    reproduce = sub.add_parser(
        "reproduce", help="run one lesson's notebook once per seed and write results/lessons/<lesson>_seeds.json"
    )
    reproduce.add_argument("lesson", help="the lesson's number, e.g. 09")
    reproduce.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                           help="seeds (default: 0 1 2 3 4; a primary claim needs five)")
    reproduce.add_argument("--profile", default="auto", choices=["auto", "smoke", "cpu", "gpu"])
    reproduce.add_argument("--out", default="runs", help="folder that receives the run folder (default: runs)")
    reproduce.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                           help="another value for a notebook parameter, e.g. --set SPLIT=validation --set BETA=0.5: "
                                "a tuning variant, written to results/lessons/<lesson results>_tune_<...>.json")
    reproduce.add_argument("--from-run", default=None, metavar="RUN_DIR",
                           help="run no notebook: summarise an earlier run folder again with the lesson's current claims")
    reproduce.set_defaults(func=_reproduce)

    exercises = sub.add_parser("exercises", help="generate exercises/ from the solution notebooks")
    exercises.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when an exercise is stale or missing"
    )
    exercises.add_argument(
        "--solutions", default="solutions", help="folder of solution notebooks (default: solutions)"
    )
    exercises.add_argument(
        "--exercises", default="exercises", help="folder of exercise notebooks (default: exercises)"
    )
    exercises.set_defaults(func=_exercises)

    strip = sub.add_parser("strip", help="store notebooks clean, in place: no outputs, execution counts or run metadata")
    strip.add_argument(
        "--check", action="store_true",
        help="write nothing; exit 1 when a notebook is not stored clean (outputs, execution counts, run metadata, "
             "or a layout other than nbformat's)"
    )
    strip.add_argument("paths", nargs="+", metavar="PATH", help="notebook files, or folders of them")
    strip.set_defaults(func=_strip)

    data = sub.add_parser("data", help="regenerate the task files under data/ from fixed seeds")
    data.add_argument("--out", default=None, help="folder to write (default: the repository's data/)")
    data.set_defaults(func=_data)

    docs = sub.add_parser("docs", help="render the generated tables of README.md and docs/results.md from results/")
    docs.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is stale")
    docs.set_defaults(func=_docs)

    grade = sub.add_parser("grade", add_help=False, help="grade students' exercise notebooks by their checks "
                           "(agentrl_lite.course.grade; `agentrl-lite grade --help`)")
    grade.add_argument("rest", nargs=argparse.REMAINDER)
    grade.set_defaults(func=_grade)

    site = sub.add_parser("site", add_help=False, help="build the course website into build/site/ "
                          "(agentrl_lite.course.site; `agentrl-lite site --help`)")
    site.add_argument("rest", nargs=argparse.REMAINDER)
    site.set_defaults(func=_site)

    train = sub.add_parser("train", add_help=False, help="train a lesson's environment with our trainer or TRL's, "
                           "on one process or many (agentrl_lite.course.train; `agentrl-lite train --help`)")
    train.add_argument("rest", nargs=argparse.REMAINDER)
    train.set_defaults(func=_train)
    return parser


def _grade(args: argparse.Namespace) -> int:
    from agentrl_lite.course.grade import main as grade_main

    return grade_main(args.rest)


def _site(args: argparse.Namespace) -> int:
    from agentrl_lite.course.site import main as site_main

    return site_main(args.rest)


def _train(args: argparse.Namespace) -> int:
    from agentrl_lite.course.train import main as train_main

    train_main(args.rest)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:  # its own parser: argparse's REMAINDER would stop at the first --option
        return _train(argparse.Namespace(rest=argv[1:]))
    if argv[:1] in (["site"], ["grade"]):
        return {"site": _site, "grade": _grade}[argv[0]](argparse.Namespace(rest=argv[1:]))
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
