"""Byte vs proxy vs tokenizer at equal compute: arms, budget accounting, scoring, stability and the report."""
from proxycomp.compare.arms import ARMS, MODEL_SIZES, Arm, CompareError, parse_arms
from proxycomp.compare.budget import ArmPlan, Budget, plan_arm
from proxycomp.compare.curve import ValBpbCurve
from proxycomp.compare.runner import Comparison
from proxycomp.compare.spec import CompareSpec
from proxycomp.compare.stability import compressor_stats, delete_characters, levenshtein

__all__ = [
    "ARMS",
    "MODEL_SIZES",
    "Arm",
    "ArmPlan",
    "Budget",
    "CompareError",
    "CompareSpec",
    "Comparison",
    "ValBpbCurve",
    "compressor_stats",
    "delete_characters",
    "levenshtein",
    "parse_arms",
    "plan_arm",
]
