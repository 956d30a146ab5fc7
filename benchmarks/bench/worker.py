"""One rank started by :func:`bench.launch.launch`: ``python -m bench.worker module:function args out``."""

from __future__ import annotations

import importlib
import json
import os
import sys
import warnings


def main(argv: list[str]) -> int:
    target, args_path, out_path = argv
    warnings.filterwarnings("ignore")
    module_name, _, func_name = target.partition(":")
    func = getattr(importlib.import_module(module_name), func_name)
    with open(args_path) as f:
        args = json.load(f)
    result = func(args)
    if int(os.environ.get("RANK", "0")) == 0:
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
