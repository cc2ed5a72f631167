#!/usr/bin/env python3
"""Run a bench script with ``qwen_ops`` imported from this checkout, installed or not.

    python3 bench/run_from_checkout.py bench/e2e/bench_graph_mode.py --device cuda ...

The lent GPU machine has torch and triton but no install of qwen_ops (nothing can be built or fetched
there in a lease): ``bench/device_check.sh`` runs its extra scripts through this, which imports the
package the way ``device_check.py`` does (``import_qwen_ops``: the checkout's folders as the package's
search path, no C++ extension) and then runs the script as ``__main__`` with the remaining arguments.
"""
import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from device_check import import_qwen_ops  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: run_from_checkout.py SCRIPT [ARGS...]")
    import_qwen_ops()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
