"""``gdn_decode_step``: a GDN layer's whole decode step (conv update, gates, delta rule, output norm) in one call.

``op.py`` states the contract and dispatches; ``reference.py`` defines it as the composition of the separate
ops' references; ``triton.py`` is the one-launch Triton kernel; the torch backend's CPU kernel is C++
(``bindings/cpu/gdn_decode_step_cpu.cpp``) and the Ascend C one is ``ops_ascendc/gdn_decode_step``.
"""
