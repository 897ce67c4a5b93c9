"""The performance model: a GXU launch's time predicted from the hardware spec.

What is known about a launch (`launch_facts`: its plan and its tile's phases, read from the
kernel's source by `kernel_work`, refined by what its binary says in `evidence`, read by
`machine_code`; its programs per SM from `residency`) goes into one formula (`core`): waves
x tiles x tile time against the DRAM bound. A tile's memory time comes from the module for
its kind of work (`tile`, `chunk_loop`, `pipelined`) and what the caches give back
(`caches`); every coefficient is a spec field (`terms`), fitted on a GPU by `calibrate`.
"""
