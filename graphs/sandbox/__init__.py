"""A sandbox for model-written code: each run is its own confined process, judged from outside.

What confines a run, layer by layer (``Sandbox.describe()`` says which are in force here):

- process (always): a separate interpreter (``python -P -S -B``) in its own session, started
  with a minimal environment (no SPARRING_*, no keys or tokens: nothing is inherited), working
  in a fresh temporary directory that is removed afterwards whatever the code left in it; its
  output goes to files.
- resource limits (always, POSIX): CPU seconds, address space, file size, processes, no core
  files. Root is exempt from the process limit, so when sparring runs as root the code runs as
  an unprivileged uid (``setpriv``; 64000 by default).
- memory per run: a cgroup of its own bounds all the run's processes together where the
  sandbox can make one; elsewhere the process count is lowered so that processes x address
  space stays within ``Limits.run_memory_mb``.
- disk per run: the parent measures the working directory while the code runs and stops the
  run past ``Limits.disk_mb`` or ``Limits.files`` (checked every 50 ms, so a run can overshoot by
  what it writes in that time; each file is also held to ``Limits.file_size_mb``).
- wall clock (always): past ``Limits.wall_s`` the parent kills the process group. With a PID
  namespace, the runner is its init, and every process the code started dies with it, also
  those that left the group.
- namespaces (Linux, where ``unshare --user --net --pid`` works): no network interface but a
  loopback that is down; the PID namespace above.
- Landlock (Linux >= 5.13): writes only beneath the working directory; reads only of the
  standard library (without installed packages), the libraries the interpreter needs and
  /bin, /usr/bin (``reads="python"``, the default) or of the system folders (``reads="system"``);
  no TCP (ABI 4+), no signals or abstract sockets outside (ABI 6+).
- seccomp (Linux x86_64/aarch64): no socket of any family, unix sockets on disk included; no
  ptrace or process_vm_readv/writev.
- audit hook (always): notes what the code tried, so a result names the violation; in
  degraded mode it also denies what no kernel layer covers here (weak: see ``guard``).

The verdict is reached outside the run (``probes``, ``verdict``): the run sends values as plain
data, the trusted side compares them with expected values that never entered the run, and only
the runner's supervisor (which never runs the code) writes the report. Strict mode (the
default) refuses to run where writes, network or the process count cannot be confined by the
kernel; degraded mode runs with what there is and says so in every result. A run that breaks a
limit is a ``RunResult`` with status ``violation`` and the cause, never an exception.
"""

from graphs.sandbox.limits import Limits, Mode
from graphs.sandbox.result import Check, RunResult, Status, Violation
from graphs.sandbox.sandbox import Sandbox, SandboxError, SandboxUnavailable

__all__ = ["Check", "Limits", "Mode", "RunResult", "Sandbox", "SandboxError", "SandboxUnavailable", "Status",
           "Violation"]
