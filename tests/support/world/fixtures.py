"""The fixtures of a test module that runs on a World of its own (tests/controllers)."""

from __future__ import annotations

import pytest

from tests.support.world.launcher import World


def world_fixtures(scope: str = "module", **profile):
    """`world` (a World with `profile`, e.g. trainer=True), `api` (its admin client) and
    `admin_api` (the same client, in place of the session control plane's of tests/conftest.py:
    the shared `namespace` fixture then makes each test's namespace on this world's API server).
    Assign the three in the module: `world, api, admin_api = world_fixtures(trainer=True)`."""

    @pytest.fixture(scope=scope)
    def world():
        with World(**profile) as w:
            yield w

    @pytest.fixture(scope=scope)
    def api(world):
        client = world.control_plane.api_client("admin")
        yield client
        client.close()

    @pytest.fixture(scope=scope)
    def admin_api(api):
        return api

    return world, api, admin_api
