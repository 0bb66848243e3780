"""Dicts that change while the payload reads them (finalizers run by a collection that one of
its own allocations started, or another thread that collection let run) never make an
inspection fail, on every CPython; the owner they hold is still named, with its bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakhound.core.capture import capture
from leakhound.model.names import Owners
from tests.pythons import installed_pythons
from tests.utils import spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

PYTHONS = installed_pythons()


@pytest.mark.parametrize("version", list(PYTHONS))
@pytest.mark.parametrize("owners", ["census", "dominator"])
def test_dicts_changed_by_finalizers_during_the_walk(tmp_path: Path, version: str, owners: str) -> None:
    with spawn_target("finalizer_churn", tmp_path, python=PYTHONS[version]) as child:
        before = child.report()["truth"]["finalized"]
        snaps = [capture(child.pid, top=20, owners=Owners(owners)).snapshot for _ in range(2)]
        truth = child.report()["truth"]
    assert truth["finalized"] > before  # finalizers ran while it was inspected
    for snap in snaps:
        paths = [(o.path, o.retained_bytes) for o in snap.owners]
        if owners == "census":  # first reachers: its attributes are named along other chains
            assert any(path == "__main__.HOLDER" for path, _ in paths), paths
            continue
        assert snap.owners[0].path == "__main__.HOLDER", paths
        assert within(snap.owners[0].retained_bytes, truth["holder_bytes"], 0.15), (paths[0], truth)
