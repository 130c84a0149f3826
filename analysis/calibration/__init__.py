"""The timed simulator's parameters per arch: at most two fitted, on one study, the rest fixed by
other measurements, judged on every other study.

``measured``   the measured cases (median and spread of one-pass launches) of a study's runs;
``fixed``      the terms fixed by measurements: jitter, SM-pair slowdown, miss/hit step ratio;
``params``     ``ArchParams``, the grid fit, the params files ``analysis/params/<arch>.json`` with
               their pinned inputs, and the defaults of an arch without measurements (GB10);
``simcheck``   prediction and validation rows (relative error in and out of sample, signs, scans);
``fitting``    what ``python -m analysis.calibration fit`` reads and writes.

The package re-exports the names other packages use, so ``from analysis import calibration as
cal`` then ``cal.read_params("h100")``.
"""
from analysis.calibration.fixed import (
                                        expected_normal_range,
                                        jitter_from_drift,
                                        miss_ratio_from_timing,
                                        pair_slowdown_from_lags,
)
from analysis.calibration.measured import (
                                        MISSES,
                                        MeasuredCase,
                                        case_key,
                                        case_of_row,
                                        load_measured,
                                        measured_ctas_per_sm,
                                        one_pass,
                                        run_device,
                                        study_dirs,
)
from analysis.calibration.params import (
                                        FITTABLE,
                                        MAX_FREE,
                                        NEAR_BEST,
                                        PARAMS_DIR,
                                        SIM_FIELDS,
                                        ArchParams,
                                        check_inputs,
                                        default_params,
                                        derived_params,
                                        fit,
                                        read_params,
                                        rel_rms,
                                        time_params,
                                        write_params,
)

__all__ = ["expected_normal_range", "jitter_from_drift", "miss_ratio_from_timing",
           "pair_slowdown_from_lags", "MISSES", "MeasuredCase", "case_key", "case_of_row",
           "load_measured", "measured_ctas_per_sm", "one_pass", "run_device", "study_dirs",
           "FITTABLE", "MAX_FREE", "NEAR_BEST", "PARAMS_DIR", "SIM_FIELDS", "ArchParams",
           "check_inputs", "default_params", "derived_params", "fit", "read_params", "rel_rms",
           "time_params", "write_params"]
