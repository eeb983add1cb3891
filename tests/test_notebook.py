"""notebooks/quickstart.ipynb runs end to end (with small sizes) in a fresh kernel."""

import ast
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
SMALL = """
N_SYNTH = 600
NUM_BLOBS = 4
N_DIGITS = 300
TAU_R = 2
NUM_KEYS = 4
"""


def outputs_text(cell) -> str:
    return "".join(output.get("text", "") for output in cell.get("outputs", []))


def test_the_small_sizes_override_names_the_parameters_cell_sets():
    """The fast check of the notebook: one cell is tagged 'parameters', every code cell parses, and
    every name SMALL overrides is one that cell sets (a renamed parameter would leave the run full size)."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    parameters = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(parameters) == 1, "the notebook needs exactly one cell tagged 'parameters'"
    for cell in notebook.cells:
        if cell.cell_type == "code":
            ast.parse("\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    assigned = lambda source: {
        t.id for node in ast.parse(source).body if isinstance(node, ast.Assign) for t in node.targets
    }
    assert assigned(SMALL) <= assigned(parameters[0].source)


@pytest.mark.slow
def test_quickstart_runs(tmp_path):
    # Long because: executes the whole quickstart notebook in a fresh kernel (~25 s).
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    parameters = [i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", [])]
    assert len(parameters) == 1, "the notebook needs exactly one cell tagged 'parameters'"
    notebook.cells.insert(parameters[0] + 1, nbformat.v4.new_code_cell(SMALL))

    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError if any cell fails

    text = "\n".join(outputs_text(cell) for cell in notebook.cells if cell.cell_type == "code")
    assert "pip" not in outputs_text(notebook.cells[1]), "the install cell must be skipped when installed"
    assert "k = " in text and "total epsilon = 1" in text and "4 runs in" in text
    assert "balanced clusters separated" in text and "blobs need n * epsilon >=" in text  # the plan
    assert "leaves: " in text  # explain's reasons
    figures = sum(
        output.get("output_type") == "display_data" and "image/png" in output.get("data", {})
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    )
    assert figures >= 4
