"""benchmarks/mutations.py stays applicable: every pattern still names one place in the code, every
designed test still exists. A refactor that moves a mutated line otherwise turns its mutation into a
crash of the mutation run (or, before the run checked, into a silent no-op)."""

import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from mutations import MUTATIONS, RELEASE_MUTATIONS  # noqa: E402


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name[:60])
def test_every_pattern_occurs_exactly_once(mutation):
    changes = [(mutation.file, old) for old, _ in mutation.replacements] + [(f, o) for f, o, _ in mutation.extra]
    for file, old in changes:
        assert (ROOT / file).read_text().count(old) == 1, f"{old!r} in {file}"


@pytest.mark.parametrize("mutation", MUTATIONS + RELEASE_MUTATIONS, ids=lambda m: m.name[:60])
def test_every_designed_test_exists(mutation):
    assert mutation.tests
    for node in mutation.tests:
        file, _, name = node.partition("::")
        function = re.sub(r"\[.*\]$", "", name)
        assert re.search(rf"^def {re.escape(function)}\(", (ROOT / file).read_text(), re.M), node
