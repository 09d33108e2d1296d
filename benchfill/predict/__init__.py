"""Ex-ante difficulty prediction: estimate an item's difficulty from its text before any rollout.

target (z(beta) from the IRT fit) -> features (named families) -> models (ridge, forest) ->
evaluate (K-fold, leave-one-group-out, Spearman rho, pairwise accuracy, response AUC) -> residuals
(flags) ; predictor ties them into a trained object that scores one item dict.
"""

from benchfill.predict.evaluate import cross_validate, make_splits, pairwise_accuracy, response_auc, spearman
from benchfill.predict.features import DEFAULT_FAMILIES, FAMILIES, build_blocks
from benchfill.predict.predictor import Prediction, Predictor, train
from benchfill.predict.residuals import residual_flags
from benchfill.predict.target import (
    FieldFallbackWarning,
    LabelledItems,
    benchmark_targets,
    labelled_items,
    load_targets,
)

__all__ = [
    "DEFAULT_FAMILIES",
    "FAMILIES",
    "FieldFallbackWarning",
    "LabelledItems",
    "Prediction",
    "Predictor",
    "benchmark_targets",
    "build_blocks",
    "cross_validate",
    "labelled_items",
    "load_targets",
    "make_splits",
    "pairwise_accuracy",
    "residual_flags",
    "response_auc",
    "spearman",
    "train",
]
