"""The study's vocabulary: problems, tilings, scan orders, CTA schedules, architectures, variants
and the access traces they imply. CPU-only (numpy); the single source of truth the kernel families,
the simulator and the figures all read."""
from .arch import Arch, UnknownArch, detect
from .arch import get as get_arch
from .arch import known as known_archs
from .case import Case, case_from_dict, case_to_dict
from .orders import OrderKind, ScanOrder
from .problem import SUPPORTED_HEAD_DIMS, DType, InvalidProblem, Problem, TileGrid, Tiles, cdiv
from .schedules import CtaSchedule, ScheduleKind, WorkItems, WorkOrder
from .trace import Tensor, Trace, Visits, build_trace, dispatch, visit_order
from .variant import Backend, Variant

__all__ = [
    "Case", "case_from_dict", "case_to_dict",
    "Arch", "UnknownArch", "detect", "get_arch", "known_archs",
    "OrderKind", "ScanOrder",
    "SUPPORTED_HEAD_DIMS", "DType", "InvalidProblem", "Problem", "TileGrid", "Tiles", "cdiv",
    "CtaSchedule", "ScheduleKind", "WorkItems", "WorkOrder",
    "Tensor", "Trace", "Visits", "build_trace", "dispatch", "visit_order",
    "Backend", "Variant",
]
