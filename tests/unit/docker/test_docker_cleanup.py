"""The docker backend runs without Ryuk: its containers carry labels, and those of a dead test process go."""

from __future__ import annotations

from shoal_app.runtime import images
from shoal_app.testing import cluster


def test_containers_of_dead_owners_are_orphans() -> None:
    mine = cluster.container_labels(100)
    gone = cluster.container_labels(200)
    foreign = {"some.other": "label"}
    compose_one = {images.LABEL: "compose", cluster.OWNER_LABEL: "200"}
    unlabelled_owner = {images.LABEL: "testcontainers"}
    found = [("a", mine), ("b", gone), ("c", foreign), ("d", compose_one), ("e", unlabelled_owner)]
    assert cluster.orphans(found, alive=lambda pid: pid == 100) == ["b", "e"]


def test_labels_name_the_backend_and_the_owner() -> None:
    assert cluster.container_labels(42) == {images.LABEL: "testcontainers", cluster.OWNER_LABEL: "42"}
