"""How `make test` shares the suite between its two pytest-xdist workers (`--dist loadgroup`).

A module is a unit of work, run whole on one worker, so its module-scoped servers start once. The modules that use
tests/http's shared servers (the fixtures that launch them) are one unit, run first and together: those servers
start once and stop after the last of them (tests/http/conftest.py). tests/ray is one unit: its modules each start
a local Ray instance, one at a time.
"""

from __future__ import annotations

import pytest

SHARED_SERVER_FIXTURES = frozenset({"servers", "tool_servers"})
SHARED_SERVERS_UNIT = "shared-servers"
ONE_AT_A_TIME_DIRS = frozenset({"ray"})
# Units known to take minutes go next, so that the short ones fill the time beside them rather than after them
# (an order only: every unit runs).
LONG_UNITS = (
    "ray", "http/test_ops_soak.py", "model/test_generate_cli.py", "model/test_transformers.py",
    "bench/test_device_check.py", "http/test_bounds.py", "model/test_triton_path.py", "model/test_real_size.py",
)  # fmt: skip


def uses_shared_servers(item: pytest.Item) -> bool:
    return not SHARED_SERVER_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def in_shared_servers_unit(item: pytest.Item) -> bool:
    """Whether the item belongs to a module that uses the shared servers (marked by `order_units`)."""
    marker = item.get_closest_marker("xdist_group")
    return marker is not None and marker.args[0] == SHARED_SERVERS_UNIT


def unit_of(parts: tuple[str, ...]) -> str:
    """A test file's unit from its path under tests/: its module, or its folder where that runs one at a time."""
    return parts[0] if parts[0] in ONE_AT_A_TIME_DIRS else "/".join(parts)


def order_units(items: list[pytest.Item], units: dict[pytest.Item, str]) -> None:
    """Mark each item with its unit (`xdist_group`) and sort the items: shared servers, long units, the rest."""
    shared = {units[item] for item in items if uses_shared_servers(item)}
    for item in items:
        if units[item] in shared:
            units[item] = SHARED_SERVERS_UNIT
        item.add_marker(pytest.mark.xdist_group(units[item]))
    rank = {unit: i for i, unit in enumerate((SHARED_SERVERS_UNIT, *LONG_UNITS))}
    items.sort(key=lambda item: rank.get(units[item], len(rank)))  # stable: collection order within a rank
