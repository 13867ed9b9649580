"""Checking an XGBoost model file before XGBoost reads it: XGBoost trusts the indices in
its own JSON format, so a tree whose parent or child index points outside the tree, or
back up it (a damaged or crafted base model), crashes the process with a segmentation
fault, at load or at the first prediction. A base model may come from someone else: its trees are checked
here first, every index against its tree's size and the number of features (every member's, in
an ensemble's file)."""
from __future__ import annotations

import json

from evolution.cost_model import ENSEMBLE_KEY

#: a tree's root has this parent (XGBoost's "no parent")
NO_PARENT = 2147483647
#: nodes of one tree, trees of one model (the shipped model: 125 nodes, 200 trees)
MAX_NODES, MAX_TREES = 1 << 20, 1 << 16
#: members of one ensemble's file (the shipped AVX-512 model has 4)
MAX_MEMBERS = 64
PER_NODE = ("left_children", "right_children", "parents", "split_indices", "split_conditions", "default_left",
            "base_weights", "loss_changes", "sum_hessian", "split_type")


class DamagedModel(ValueError):
    """An XGBoost model file whose structure is inconsistent: not handed to XGBoost."""


def checked_members(data: bytes, n_features: int) -> list[bytes]:
    """The XGBoost JSON models of a base model file, each checked (``check_xgboost_json``):
    the file itself, or the members of an ensemble's file (``evolution.cost_model.ENSEMBLE_KEY``,
    at most ``MAX_MEMBERS``). ``DamagedModel`` saying what is wrong otherwise."""
    try:
        model = json.loads(data)
    except ValueError as err:
        raise DamagedModel(f"not a JSON model ({type(err).__name__}: {str(err)[:120]})") from None
    if not isinstance(model, dict) or ENSEMBLE_KEY not in model:
        check_xgboost_json(model, n_features)
        return [data]
    members = model.get("members")
    if not isinstance(members, list) or not 1 <= len(members) <= MAX_MEMBERS:
        raise DamagedModel(f"an ensemble's file whose 'members' is not a list of 1 to {MAX_MEMBERS} models")
    for number, member in enumerate(members):
        try:
            check_xgboost_json(member, n_features)
        except DamagedModel as err:
            raise DamagedModel(f"member {number}: {err}") from None
    return [json.dumps(member).encode() for member in members]


def check_xgboost_json(data, n_features: int) -> None:
    """Raise ``DamagedModel`` saying what is wrong unless ``data`` (the file's bytes, or
    their parsed JSON) is an XGBoost JSON model of trees whose indices all lie in range
    (``n_features`` features)."""
    try:
        model = json.loads(data) if isinstance(data, (bytes, bytearray, str)) else data
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
