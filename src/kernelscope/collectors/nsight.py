"""Nsight Systems and Nsight Compute passes of ``kernelscope profile --nsys/--ncu``: everything Nsight-specific.

CUPTI allows one profiler per process, so the runner runs the script once per collector: a Kineto pass, then an
nsys pass (the script under ``nsys profile``, emit_nvtx on in the child), then an ncu pass (the script under
``ncu``, after the Kineto trace is stored: the kernels to profile come from it). The runner owns the processes;
this module builds the command lines, checks the tools, exports, and records what it ran in the run dir.

API (the runner codes against these names):

Tools
- ``find_tool(kind, explicit=None) -> Path``: ``kind`` "nsys" | "ncu"; ``explicit`` (``--nsys PATH``), else PATH,
  else the usual install folders, newest version first (``install_candidates``). UsageError in one line naming
  what to install (and ``--nsys PATH``/``--ncu PATH``) when absent or when ``explicit`` is not an executable.
- ``check_nsys_importer(nsys)``: nsys's SQLite export runs its QdstrmImporter, which needs libdw.so.1; checked
  with ``ldd`` on the importer next to nsys (else by loading libdw.so.1) BEFORE the script runs. UsageError
  naming the Debian/Ubuntu package (libdw1) and LD_LIBRARY_PATH.

nsys pass (run dir files: ``<name>.nsys-rep`` kept, ``<name>.sqlite`` ingested; ``nsys_paths``)
- ``nsys_prefix(nsys, out_base, capture_range) -> list[str]``: ``nsys profile --trace=cuda,nvtx --sample=none
  --cpuctxsw=none --force-overwrite=true -o OUT`` (+ ``--capture-range=cudaProfilerApi --capture-range-end=stop``
  when ``capture_range``: a schedule was given). Append the child's argv.
- ``child_nvtx(capture_range=False, schedule=None)``: context manager for the runner's CHILD process of the nsys
  pass (and of the ncu pass with a capture range). Enables ``torch.autograd.profiler.emit_nvtx(record_shapes=
  True)`` for the script; yields an ``NvtxPass`` with ``start()``/``stop()`` (``torch.cuda.profiler`` start/stop:
  the capture range) and ``step()`` (call once per script step; with ``schedule=(wait, warmup, active[, repeat])``
  it calls start() when the first active step begins and stop() after the last one of the first cycle).
  Without a capture range start/stop/step do nothing.
- ``nsys_export(nsys, rep) -> Path``: ``nsys export --type sqlite`` next to the report (the report is kept);
  KernelscopeError in one line when the export fails.
- ``nsys_pass(nsys, run_dir, name, child_argv, *, env=None, capture_range=False) -> PassResult``: the whole pass
  (prefix + run + export + record in run.json), for a runner that wants one call.

ncu pass (run dir file ``<name>_ncu.csv``; ``ncu_csv_path``)
- ``parse_ncu_spec(spec) -> NcuSpec``: ``"top:N"`` (N kernel names by total GPU time in the stored trace) or a
  regex on kernel FUNCTION names (ncu's default ``--kernel-name-base function``: no return type, namespace,
  template or parameters, e.g. ``vectorized_elementwise_kernel``). UsageError for ``top:0``, ``top:x``, a bad
  regex.
- ``ncu_targets(spec, kernels) -> NcuTargets``: ``kernels``: rows (name, launches, gpu_ns) of the stored trace's
  kernels, as ``storage.ncu.top_kernels(store, trace_id)`` returns them (reach it with ``stored_kernels(db,
  trace_id)`` here, which imports storage through importlib). Gives ``regex`` (for ``--kernel-name``),
  ``names`` and ``launch_count`` (the chosen kernels' launches in the trace, capped).
- ``kernel_regex(names) -> str``: ``^(?:a|b|...)$`` over the function names (``parsers.ncu.kernel_name_key``) of
  demangled kernel names, every non-word character escaped.
- ``ncu_prefix(ncu, regex, launch_count, log_file, *, capture_range=False, clock_control="base",
  cache_control="all") -> list[str]``: ``ncu --csv --page raw --print-units base --log-file OUT --kernel-name-base
  function --kernel-name regex:... --launch-count K --clock-control C --cache-control C --set basic --metrics
  NCU_METRICS`` (+ ``--profile-from-start off`` with a capture range). The CSV goes to ``log_file`` (not
  stdout, where the script prints).
- ``ncu_pass(ncu, run_dir, name, child_argv, targets, *, env=None, capture_range=False, ...) -> PassResult``: the
  whole pass, the CSV written to a temporary name and renamed when ncu succeeded, settings recorded in run.json.

Recording: ``record_pass(run_dir, kind, info)`` merges ``info`` into ``run.json["nsight"][kind]`` (atomic
replace). The storage side (``storage.rundir.ingest_run_all``) reads ``run.json["nsight"]["ncu"]``
``clock_control``/``cache_control`` and stores them with the ncu rows.

Checking a stored nsys trace: ``kern_sum_check(db, trace_id, csv) -> dict`` compares the stored trace's kernel
count and total kernel time with ``nsys stats --report cuda_gpu_kern_sum --format csv`` output (also
``python -m kernelscope.collectors.nsight check-kern-sum DB TRACE CSV``).
"""

from __future__ import annotations
