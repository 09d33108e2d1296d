"""IRT on response matrices: fitting (MAP, NUTS), checks, robustness and online calibration."""

from benchfill.irt.checks import compare_models, leave_one_model_out, matrix_checks
from benchfill.irt.engine import fit
from benchfill.irt.fit import IrtFit
from benchfill.irt.online import OnlineEstimate, item_information, online_calibrate

__all__ = [
    "IrtFit",
    "OnlineEstimate",
    "compare_models",
    "fit",
    "item_information",
    "leave_one_model_out",
    "matrix_checks",
    "online_calibrate",
]
