"""The launcher: run a program (or vLLM / SGLang) with its host memory placed on DRAM and CXL.

Layers:

* :mod:`.nodesets` — which CPU and memory nodes (GPU socket, tiers, explicit lists);
* :mod:`.kvsize` — how much CPU KV cache fits on the CXL tier, in tokens;
* :mod:`.engines` — engine-specific flags and environment (feature-detected);
* :mod:`.preflight` — everything that would make the policy fail or not take effect;
* :mod:`.policy` — ``set_mempolicy``/``sched_setaffinity`` through ctypes, or a numactl argv;
* :mod:`.build` — puts it together and ``exec``\\s the engine in place of cxlctl;
* :mod:`.proof` — ``cxlctl policy show PID``: where a process' pages really are.
"""
