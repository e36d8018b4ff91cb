"""Hooks the suite offers to its own plugins and to a driver repository's conftest.

Why hooks: the run's controller (ipsec_hil.session.HilSession) owns the order of a run --
lab up, the parts' lab-ready phase (preflight, build under test deployed), hardware facts
read, tests, the parts' finish, page written once. The suite's own parts take part through
their phases (ipsec_hil.context.Part, in the order ipsec_hil.pytest_plugin.parts_in_order
states); these hooks are how they, and a driver repository's conftest, add to the page
and Allure's environment without importing each other or the controller.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_hil_lab_ready(session: pytest.Session) -> None:
    """The lab is up (a virtual lab started, or a hardware lab's file loaded), no test has run.

    Called once, in the controller, from the run's ``pytest_sessionstart``, after the suite's
    parts' own lab-ready phase (preflight passed, ``--driver`` deployed) and before it reads
    the appliances' driver builds: a driver repository's conftest prepares the lab here.
    Not called when the run executes no acceptance test (``--collect-only``, ``tests/``).
    """


@pytest.hookspec
def pytest_hil_page_sections(config: pytest.Config) -> Any:
    """This run's page's section(s) from a plugin, or None: an
    ``ipsec_hil.lab.reporting.page.Section`` (a title and typed blocks: the page renders
    it), a list of them, or a ``str`` (a Markdown section, ``## Title`` and its body, that
    a driver repository's conftest rendered itself).

    Called once, in the controller, at the end of the run (after every part's ``finish``),
    in plugin registration order; the page is rendered and written once, after it.
    """


@pytest.hookspec
def pytest_hil_allure_environment(config: pytest.Config) -> dict[str, str] | None:
    """``key: value`` pairs for Allure's environment.properties (e.g. the build under test)."""


@pytest.hookspec
def pytest_hil_page_verdict(config: pytest.Config) -> list[str] | None:
    """The run's answer for the page's first line (e.g. candidate against parent: the
    first string is the verdict, the rest one line each under it), or None.

    Called once, in the controller, when the page is written (after every part's
    ``finish``). Without any, the page states the tests' own verdict.
    """


@pytest.hookspec
def pytest_hil_page_lab_state(config: pytest.Config) -> list[str] | None:
    """Lines about the lab as this run found it, for the page's first screen (right under
    the line naming the lab and its driver builds), or None: e.g. "Found a dead run's state
    and undid it ..." (ipsec_hil.recovery_plugin). One line each; details go in a section.

    Called once, in the controller, when the page is written.
    """
