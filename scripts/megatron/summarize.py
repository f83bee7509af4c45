"""Summarize a pytest JUnit XML report of Megatron-LM's data tests.

usage: python summarize.py JUNIT_XML [--label TEXT]

Prints one line ``megatron-lm data tests: N passed, M failed, K skipped (of T)``
(errors in setup, teardown or collection count as failed), then one line per failing or
skipped test with the first line of its message. Exit status 0 when nothing failed.
"""

# ruff: noqa: T201  (a command-line script: it prints its report)

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass


@dataclass
class Outcome:
    """One test's result: ``passed``, ``failed`` or ``skipped``, and why."""

    name: str
    status: str = "passed"
    message: str = ""


def _node_id(case: ElementTree.Element) -> str:
    module = case.get("classname", "")
    if not module:  # a collection error: name is the module's dotted path
        return case.get("name", "").replace(".", "/") + ".py"
    parts = module.split(".")
    # classname is "tests.unit_tests.data.test_x" or "...test_x.TestClass"
    path_parts = [p for p in parts if not p[:1].isupper()]
    classes = [p for p in parts if p[:1].isupper()]
    node = "/".join(path_parts) + ".py"
    return "::".join([node, *classes, case.get("name", "")])


def _first_line(element: ElementTree.Element) -> str:
    message = (element.get("message") or element.text or "").strip()
    return message.splitlines()[0][:300] if message else element.tag


def read(path: str) -> list[Outcome]:
    """Every test case of the report, one outcome per test id."""
    outcomes: dict[str, Outcome] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        node = _node_id(case)
        outcome = outcomes.setdefault(node, Outcome(node))
        for child in case:
            if child.tag in ("failure", "error"):
                if outcome.status != "failed":
                    outcome.message = _first_line(child)
                outcome.status = "failed"
            elif child.tag == "skipped" and outcome.status == "passed":
                outcome.status = "skipped"
                outcome.message = _first_line(child)
    return list(outcomes.values())


def main(argv: list[str]) -> int:
    """Print the summary line and the failures."""
    if not argv:
        sys.stderr.write(__doc__ or "")
        return 2
    outcomes = read(argv[0])
    count = {status: 0 for status in ("passed", "failed", "skipped")}
    for outcome in outcomes:
        count[outcome.status] += 1
    print(
        f"megatron-lm data tests: {count['passed']} passed, {count['failed']} failed, "
        f"{count['skipped']} skipped (of {len(outcomes)})"
    )
    for status in ("failed", "skipped"):
        for outcome in outcomes:
            if outcome.status == status:
                print(f"  {status.upper()} {outcome.name}: {outcome.message}")
    return 1 if count["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
