"""The aeon estimator: aeon's shared estimator contract and the docstring's example."""

from __future__ import annotations

import doctest

import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small models: one thread is fastest


def test_patchtst_classifier_passes_aeon_check_estimator():
    """Every check aeon runs for a classifier (constructor, tags, fit/predict contract, cloning, pickling,
    expected output shapes), on the estimator's own tiny test parameters."""
    from aeon.testing.estimator_checking import check_estimator

    from jumbokit.timeseries.estimator import PatchTSTClassifier

    results = check_estimator(PatchTSTClassifier, raise_exceptions=True)
    checks = {name.split("(")[0] for name in results}
    assert {"check_classifier_output", "check_fit_updates_state_and_cloning", "check_persistence_via_pickle",
            "check_non_state_changing_method"} <= checks
    assert all(outcome == "PASSED" for outcome in results.values()), results


@pytest.mark.slow
def test_patchtst_classifier_docstring_example_runs():
    from jumbokit.timeseries import estimator

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(estimator.PatchTSTClassifier, "PatchTSTClassifier", globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 5
