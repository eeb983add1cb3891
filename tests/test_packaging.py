"""What a new user installs (issue 23): a version, honest minimums, no placeholder addresses, a wheel."""

import json
import pathlib
import re
import subprocess
import sys
import zipfile


import pytest

import dpm_jax

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_version_and_the_declared_minimums_are_the_documented_ones():
    assert PROJECT["version"] == dpm_jax.__version__
    minimums = dict(re.match(r"([a-z]+)>=([\d.]+)$", spec).groups() for spec in PROJECT["dependencies"])
    assert minimums["jax"] == minimums["jaxlib"]
    usage, readme = (ROOT / "docs" / "usage.md").read_text(), (ROOT / "README.md").read_text()
    assert f"jax/jaxlib {minimums['jax']} with NumPy {minimums['numpy']}" in usage
    assert f"jax/jaxlib >= {minimums['jax']} and NumPy >= {minimums['numpy']}" in readme


def test_no_placeholder_addresses_and_the_install_cell_names_the_package():
    notebook = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    install = "".join(notebook["cells"][1]["source"])
    assert '"dpm-jax"' in install and "python -m build" in install and "not on the package index" in install
    for path in [ROOT / "README.md", ROOT / "notebooks" / "quickstart.ipynb", *sorted((ROOT / "docs").glob("*.md"))]:
        assert "<owner>" not in path.read_text(), path


@pytest.mark.slow
def test_a_wheel_builds_and_its_metadata_passes_twine(tmp_path):
    # Long because: builds the sdist and the wheel in an isolated environment (~30 s).
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path), str(ROOT)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheels = list(tmp_path.glob(f"dpm_jax-{dpm_jax.__version__}-py3-none-any.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as wheel:  # the MIT licence the metadata declares ships with it
        assert any(name.endswith("licenses/LICENSE") for name in wheel.namelist()), wheel.namelist()
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", *map(str, tmp_path.iterdir())], capture_output=True, text=True
    )
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr
