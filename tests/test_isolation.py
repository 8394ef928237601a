"""conftest's autouse fixture: every test sees a temporary home, never the user's store, caches or tokens."""

from __future__ import annotations

import os
from pathlib import Path

from localllm.hub import default_home
from localllm.hub.hf import _hf_home


def _inside(p: Path, root: Path) -> bool:
    return Path(p).resolve().is_relative_to(root.resolve())


def test_every_path_points_into_the_test_home(_isolated_home):
    assert _inside(default_home(), _isolated_home)
    assert _inside(Path(_hf_home()), _isolated_home)
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        assert _inside(Path(os.environ[name]), _isolated_home)
    assert "HF_TOKEN" not in os.environ and "LOCALLLM_CATALOG" not in os.environ
    assert os.environ["HF_ENDPOINT"].startswith("http://127.0.0.1:")


def test_a_tests_own_undo_does_not_lift_it(_isolated_home, monkeypatch, tmp_path):
    monkeypatch.setenv("LOCALLLM_HOME", str(tmp_path / "mine"))
    assert default_home() == tmp_path / "mine"
    monkeypatch.undo()  # what test_disk_full_at_fsync_while_importing does: back to the fixture's home
    assert _inside(default_home(), _isolated_home)


def test_each_test_gets_a_fresh_home(_isolated_home):
    assert not default_home().exists() or not any(default_home().iterdir())
