"""A callback for tests: every task result, one JSON line each, to $PROVISION_TEST_RESULTS."""

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: record
type: aggregate
short_description: every task result as a JSON line (provision's tests)
description: Appends {host, task, status, result} per task result to the file PROVISION_TEST_RESULTS names.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, status, result):
        line = {
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "status": status,
            "result": json.loads(json.dumps(result._result, default=str)),
        }
        with open(os.environ["PROVISION_TEST_RESULTS"], "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

    def v2_runner_on_ok(self, result):
        self._write("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write("failed", result)

    def v2_runner_on_skipped(self, result):
        self._write("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._write("unreachable", result)
