"""Byte vs proxy vs tokenizer at equal compute: arms, budget accounting, scoring, stability and the report."""
from proxycomp.compare.arms import ARMS, MODEL_SIZES, Arm, CompareError, parse_arms
from proxycomp.compare.budget import ArmPlan, Budget, plan_arm
from proxycomp.compare.evaluation import Scorer, ValBpbCurve, scorer_for, view_bpb
from proxycomp.compare.runner import Comparison
from proxycomp.compare.spec import CompareSpec, build_spec
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
    "Scorer",
    "ValBpbCurve",
    "build_spec",
    "compressor_stats",
    "delete_characters",
    "levenshtein",
    "parse_arms",
    "plan_arm",
    "scorer_for",
    "view_bpb",
]
