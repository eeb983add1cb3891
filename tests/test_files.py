"""Atomic result files (dpm_jax/files.py): a reader sees the old file or the complete new one."""

import json
import os

import pytest

from dpm_jax.files import write_atomically, write_json


def test_atomic_write_leaves_old_file_or_nothing(tmp_path):
    target = tmp_path / "release.json"

    def fail_midway(file):
        file.write("partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_atomically(str(target), fail_midway)
    assert os.listdir(tmp_path) == []
    target.write_text("old")
    with pytest.raises(OSError):
        write_atomically(str(target), fail_midway)
    assert os.listdir(tmp_path) == ["release.json"] and target.read_text() == "old"
    write_atomically(str(target), lambda file: file.write("new"))
    assert os.listdir(tmp_path) == ["release.json"] and target.read_text() == "new"
    umask = os.umask(0o022)
    try:
        write_atomically(str(target), lambda file: file.write("newer"))
    finally:
        os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o644  # as a plain open() would create it


def test_write_json_round_trips_and_replaces(tmp_path):
    target = tmp_path / "result.json"
    write_json(target, {"a": [1, 2.5]})
    write_json(target, {"b": None}, indent=1)
    assert json.loads(target.read_text()) == {"b": None}
    assert os.listdir(tmp_path) == ["result.json"]
    with pytest.raises(TypeError):  # not JSON-serialisable: the old file stays
        write_json(target, {"c": object()})
    assert json.loads(target.read_text()) == {"b": None}
