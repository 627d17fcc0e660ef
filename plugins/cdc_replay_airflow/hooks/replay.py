"""ReplaySubmitHook: the Spark provider's SparkSubmitHook, plus what the replay app needs.

* Spark's console progress bar becomes one log line per stage per 10% (cdc_replay_airflow.progress).
* The app's exit status is kept: 2 means bad arguments or input (retrying cannot help, so the
  task fails without retries), 3 means more records were quarantined than --max-bad-records
  (the output is committed; the validate task reads the manifest and fails the run loudly).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from cdc_replay_airflow.progress import SparkProgress

EXIT_BAD_INPUT = 2
EXIT_QUARANTINE = 3


class ReplaySubmitHook(SparkSubmitHook):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_replay()

    def _init_replay(self, env: dict[str, str] | None = None) -> None:
        self.returncode: int | None = None
        self._progress = SparkProgress()
        self._extra_env = dict(env or {})

    @classmethod
    def adopt(cls, hook: SparkSubmitHook, env: dict[str, str] | None = None) -> "ReplaySubmitHook":
        """Make the hook SparkSubmitOperator built (from its many arguments) a ReplaySubmitHook,
        adding `env` to the subprocess environment."""
        hook.__class__ = cls
        hook._init_replay(env)
        return hook

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        if self._extra_env:  # for the spark-submit subprocess only (os.environ + these)
            self._env = {**(self._env or {}), **self._extra_env}
        return args

    @property
    def master(self) -> str:
        return self._connection["master"]

    def _process_spark_submit_log(self, itr) -> None:
        return super()._process_spark_submit_log(self._filter(itr))

    def _filter(self, itr):
        for line in itr:
            messages, is_bar = self._progress.feed(line)
            for message in messages:
                self.log.info(message)
            if not is_bar and line.strip():
                yield line

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        try:
            result = super().submit(application, **kwargs)
            self.returncode = 0
            return result
        except AirflowException as e:
            self.returncode = self._submit_sp.returncode if self._submit_sp is not None else None
            if self.returncode == EXIT_QUARANTINE:
                self.log.warning("The replay quarantined more records than --max-bad-records allows; its output "
                                 "and manifest are committed, and the validate task will fail the run.")
                return None
            if self.returncode == EXIT_BAD_INPUT:
                raise AirflowFailException(f"the replay app refused its arguments or input (exit status 2), "
                                           f"so retrying cannot help: {e}") from e
            raise
