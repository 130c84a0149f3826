import json, sys
from spec import get_arch
from spec.case import case_to_dict
from experiments.studies import get_study
arch = get_arch("h100")
cases = [c for c in get_study("drift").plan(arch) if c.problem.B == 1]
json.dump({"arch": "h100", "cases": [case_to_dict(c) for c in cases], "trace_dir": sys.argv[1],
           "launches": 2, "seed": 0}, open(sys.argv[2], "w"))
print(len(cases), "cases")
