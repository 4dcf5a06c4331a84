"""``kernelscope profile -- python script.py args``: profile a script that never imports kernelscope.

The parent starts a child ``python -m kernelscope.collectors.runner --run-dir D [--name N]
[--labels JSON] -- script.py args``; the child runs the script with ``runpy.run_path`` (as
``__main__``, ``sys.argv`` = script and its args) inside ``profile(ingest=False)`` and exits with the
script's exit code. The parent then ingests the run dir and returns that exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernelscope.errors import UsageError


def _split(argv: list[str]) -> tuple[list[str], str]:
    """(script argv, how to run it: 'path' | 'module') from ``python s.py args`` or ``s.py args``."""
    if not argv:
        raise UsageError("kernelscope profile: no command given; write `kernelscope profile -- python script.py`.")
    args = list(argv)
    if Path(args[0]).name.startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] != "-m":
            args = args[1:]  # interpreter flags (-u, -O) are not kept
    if not args:
        raise UsageError("kernelscope profile: no script given after python; write `-- python script.py`.")
    if args[0] == "-m":
        if len(args) < 2:
            raise UsageError("kernelscope profile: `-m` needs a module name.")
        return args[1:], "module"
    if not args[0].endswith(".py") and not Path(args[0]).is_file():
        raise UsageError(f"kernelscope profile: {args[0]!r} is not a Python script; "
                         "write `kernelscope profile -- python script.py args`.")
    if not Path(args[0]).is_file():
        raise UsageError(f"kernelscope profile: script {args[0]!r} not found.")
    return args, "path"


def run_script(argv: list[str], *, name=None, labels=None, db=None, run_dir=None, ingest=True) -> int:
    """Run ``argv`` (``python script.py args``) under the profiler and sampler; ingest; return its code."""
    script, how = _split(argv)
    from .profile import _default_run_dir, ingest_run_dir

    name = name or Path(script[0]).stem
    run_dir = Path(run_dir) if run_dir is not None else _default_run_dir(name)
    cmd = [sys.executable, "-m", "kernelscope.collectors.runner", "--run-dir", str(run_dir),
           "--name", name, "--labels", json.dumps(labels or {}), "--how", how, "--", *script]
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # make kernelscope importable in the child
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    rc = subprocess.run(cmd, env=env).returncode
    if ingest and (run_dir / "trace.json.gz").is_file():
        res = ingest_run_dir(run_dir, name=name, labels=labels, db=db)
        print(f"kernelscope: run {run_dir} {res.status} as trace {res.trace_id} "
              f"(`kernelscope summary {res.trace_id}`)", file=sys.stderr)
    elif ingest:
        print(f"kernelscope: the script wrote no trace in {run_dir}; nothing ingested", file=sys.stderr)
    return rc


def _child(args: list[str]) -> int:
    import runpy

    from .profile import profile

    opts = {}
    while args and args[0] != "--":
        opts[args[0]] = args[1]
        args = args[2:]
    script = args[1:]
    sys.argv = list(script)
    code = 0
    prof = profile(name=opts.get("--name"), labels=json.loads(opts.get("--labels", "{}")),
                   run_dir=opts["--run-dir"], ingest=False)
    with prof:
        try:
            if opts.get("--how") == "module":
                runpy.run_module(script[0], run_name="__main__", alter_sys=True)
            else:
                sys.path.insert(0, str(Path(script[0]).resolve().parent))
                runpy.run_path(script[0], run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
