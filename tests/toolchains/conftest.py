"""The compiler checks live in bench/toolchains/ (scripts, not a package): their folder goes on sys.path,
and so does this one (broken_kernel.py)."""
import os
import sys

TOOLCHAINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench",
                          "toolchains")
sys.path.insert(0, TOOLCHAINS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
