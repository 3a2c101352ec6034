"""``Budget``: one budget's label, test id, benchmark group and order, defined once."""

from __future__ import annotations

from pytest_ddtree.core.budget import Budget, budget_order, group_order
from pytest_ddtree.core.settings import budget_id, budget_label
from pytest_ddtree.measure.bench import group_name


def test_names() -> None:
    assert Budget(64).label == budget_label(64) == "64"
    assert Budget(None).label == budget_label(None) == "server-default"
    assert Budget(64).test_id == budget_id(64) == "tree_budget=64"
    assert Budget(None).group() == group_name(None) == "tree_budget=server-default"
    assert Budget(64).group(0.7) == group_name(64, 0.7) == "tree_budget=64 temperature=0.7"


def test_the_server_default_sorts_first_then_by_number() -> None:
    assert sorted([512, None, 16, 64], key=budget_order) == [None, 16, 64, 512]
    assert sorted([Budget(64), Budget(None), Budget(16)]) == [Budget(None), Budget(16), Budget(64)]


def test_read_back_from_a_name() -> None:
    assert Budget.in_name("test_x.py::test_speed[tree_budget=64-p1]") == Budget(64)
    assert Budget.in_name("tree_budget=server-default temperature=0.7") == Budget(None)
    assert Budget.in_name("other group") is None
    names = ["tree_budget=128", "other", "tree_budget=16", "tree_budget=server-default"]
    assert sorted(names, key=lambda n: (group_order(n), n)) == [
        "other",
        "tree_budget=server-default",
        "tree_budget=16",
        "tree_budget=128",
    ]
