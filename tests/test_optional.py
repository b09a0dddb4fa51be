"""tools/grading/optional.py: a base class from an optional package, or ``object`` without it."""

from __future__ import annotations

import collections
import importlib

import pytest

from tools.grading.optional import optional_base


def test_the_class_when_its_package_is_here():
    assert optional_base("collections", "OrderedDict") is collections.OrderedDict


@pytest.mark.parametrize(
    ("module", "name"),
    [("a_package_that_is_not_installed", "Base"), ("collections", "NoSuchClass")],
)
def test_object_when_the_package_or_the_name_is_missing(module, name):
    assert optional_base(module, name) is object


def test_the_nbgrader_classes_build_on_what_is_installed():
    """In .venv-nbgrader they extend nbgrader's classes; elsewhere they still import."""
    from tools.grading.feedback import FeedbackPage
    from tools.grading.guard import FreshChecks
    from tools.grading.restore import RestoreFromRelease
    from tools.grading.stops import StopsExecute

    for cls, module, name in (
        (FeedbackPage, "nbconvert.exporters", "HTMLExporter"),
        (FreshChecks, "nbgrader.preprocessors", "NbGraderPreprocessor"),
        (RestoreFromRelease, "nbgrader.preprocessors", "NbGraderPreprocessor"),
        (StopsExecute, "nbgrader.preprocessors", "Execute"),
    ):
        try:
            base = getattr(importlib.import_module(module), name)
        except ImportError:
            base = object
        assert cls.__mro__[1] is base
