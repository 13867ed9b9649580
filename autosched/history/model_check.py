"""Checking an XGBoost model file before XGBoost reads it: XGBoost trusts the indices in
its own JSON format, so a tree whose parent or child index points outside the tree, or
back up it (a damaged or crafted base model), crashes the process with a segmentation
fault, at load or at the first prediction. A base model may come from someone else: its trees are checked
here first, every index against its tree's size and the number of features."""
from __future__ import annotations

import json

#: a tree's root has this parent (XGBoost's "no parent")
NO_PARENT = 2147483647
#: nodes of one tree, trees of one model (the shipped model: 125 nodes, 200 trees)
MAX_NODES, MAX_TREES = 1 << 20, 1 << 16
PER_NODE = ("left_children", "right_children", "parents", "split_indices", "split_conditions", "default_left",
            "base_weights", "loss_changes", "sum_hessian", "split_type")


class DamagedModel(ValueError):
    """An XGBoost model file whose structure is inconsistent: not handed to XGBoost."""


def check_xgboost_json(data: bytes, n_features: int) -> None:
    """Raise ``DamagedModel`` saying what is wrong unless ``data`` is an XGBoost JSON model
    of trees whose indices all lie in range (``n_features`` features)."""
    try:
        model = json.loads(data)
        learner = model["learner"]
        params = learner["learner_model_param"]
        booster = learner["gradient_booster"]
        if booster.get("name") != "gbtree":
            raise DamagedModel(f"a {booster.get('name')!r} booster; expected 'gbtree'")
        trees = booster["model"]["trees"]
        info = booster["model"]["tree_info"]
        features = int(params["num_feature"])
        num_trees = int(booster["model"]["gbtree_model_param"]["num_trees"])
        groups = max(int(params.get("num_class", 0)), int(params.get("num_target", 1)), 1)
    except (ValueError, KeyError, TypeError) as err:
        if isinstance(err, DamagedModel):
            raise
        raise DamagedModel(f"not an XGBoost JSON model ({type(err).__name__}: {str(err)[:120]})") from None
    if features != n_features:
        raise DamagedModel(f"it ranks programs by {features} features; this autosched's have {n_features}")
    if not isinstance(trees, list) or not isinstance(info, list) or len(trees) > MAX_TREES \
            or len(trees) != num_trees or len(info) != num_trees:
        raise DamagedModel(f"its tree counts disagree: num_trees {num_trees}, {len(trees)} trees, "
                           f"{len(info)} tree_info entries")
    if any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < groups for g in info):
        raise DamagedModel(f"its tree_info names output groups outside 0..{groups - 1}")   # (XGBoost aborts)
    for number, tree in enumerate(trees):
        why = _tree_problem(tree, features)
        if why:
            raise DamagedModel(f"tree {number}: {why}")


def _tree_problem(tree, features: int) -> str | None:
    try:
        n = int(tree["tree_param"]["num_nodes"])
        if int(tree["tree_param"]["num_feature"]) != features:
            return "its number of features differs from the model's"
    except (KeyError, TypeError, ValueError) as err:
        return f"no valid tree_param ({type(err).__name__})"
    if not 1 <= n <= MAX_NODES:
        return f"{n} nodes"
    for field in PER_NODE:
        values = tree.get(field)
        if not isinstance(values, list) or len(values) != n:
            return f"{field} is not a list of {n} entries"
    for field, low, high, extra in (("left_children", 0, n, -1), ("right_children", 0, n, -1),
                                    ("parents", 0, n, NO_PARENT), ("split_indices", 0, features, None)):
        for v in tree[field]:
            if not isinstance(v, int) or isinstance(v, bool) or not (low <= v < high or v == extra):
                return f"{field} holds {str(v)[:40]}, outside 0..{high - 1}"
    if tree["parents"][0] != NO_PARENT:
        return "its first node is not the root"
    seen = set()   # (a walk from the root must end: every child has one parent, its own, and is not the root)
    for node, (left, right) in enumerate(zip(tree["left_children"], tree["right_children"])):
        if (left == -1) != (right == -1):
            return f"node {node} has one child"
        for child in (left, right) if left != -1 else ():
            if child == 0 or child in seen or tree["parents"][child] != node:
                return f"node {node}'s child {child} is not a node of its own below it"
            seen.add(child)
    for v in tree["split_type"]:
        if v not in (0, 1):
            return f"split_type holds {str(v)[:40]}"
    if any(tree.get(f) for f in ("categories", "categories_nodes", "categories_segments", "categories_sizes")):
        return "categorical splits (autosched's models have none)"
    return None
