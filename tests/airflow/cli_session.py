"""One `airflow` CLI process that runs several commands, one after the other (run by
tests/airflow/conftest.py's `AirflowSession` with the venv's Python: no import of the tests).

Each `airflow dags test` in its own process pays ~11 s before and after its tasks: Airflow's
import, its in-process execution API building its versioned routes (once per process), and the
exit. Here each command is the `airflow` entry point's own parser and function (as
`airflow.__main__.main` calls them), read as a JSON argument list from stdin; its output ends
with a line `MARKER <exit code>` on stdout, stderr being the same pipe."""

from __future__ import annotations

import json
import os
import sys
import traceback

MARKER = "@@cdc-replay-airflow-command-done@@"


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # the tests' modules are not Airflow's
    from airflow.__main__ import main as airflow_main  # noqa: F401 - Airflow's own start-up, as `airflow` does
    from airflow.cli import cli_parser
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()
    parser = cli_parser.get_parser()
    for line in sys.stdin:
        code = 0
        try:
            args = parser.parse_args(json.loads(line))
            args.func(args)
        except SystemExit as e:  # what `airflow` exits with: None/0 success, a message or a number failure
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - reported as the command's failure, as the CLI would
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        print(f"\n{MARKER} {code}", flush=True)


if __name__ == "__main__":
    main()
