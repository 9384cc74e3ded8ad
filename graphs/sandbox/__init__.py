"""A sandbox for model-written code: each run is its own confined process.

What confines a run, layer by layer (``Sandbox.describe()`` says which are in force here):

- process (always): a separate interpreter (``python -P -S -B``) in its own session, started
  with a minimal environment (no SPARRING_*, no keys or tokens: nothing is inherited), working
  in a fresh temporary directory that is deleted afterwards; its output goes to files, its
  report to a pipe.
- resource limits (always, POSIX): CPU seconds, address space, file size, processes, no core
  files. Root is exempt from the process limit, so when sparring runs as root the code runs as
  an unprivileged uid (``setpriv``; 64000 by default).
- wall clock (always): past ``Limits.wall_s`` the parent kills the process group. With a PID
  namespace, the runner is its init, and every process the code started dies with it, also
  those that left the group.
- namespaces (Linux, where ``unshare --user --net --pid`` works): no network interface but a
  loopback that is down; the PID namespace above.
- Landlock (Linux >= 5.13): writes only beneath the working directory; reads only of the
  system and Python folders; no TCP (ABI 4+), no signals or abstract sockets outside (ABI 6+).
- seccomp (Linux x86_64/aarch64): no socket of any family, unix sockets on disk included.
- audit hook (always): notes what the code tried, so a result names the violation; in
  degraded mode it also denies what no kernel layer covers here (weak: see ``guard``).

Strict mode (the default) refuses to run where writes, network or the process count cannot be
confined by the kernel; degraded mode runs with what there is and says so in every result.
A run that breaks a limit is a ``RunResult`` with status ``violation`` and the cause, never
an exception. What the sandbox does not do: make the code's own report unforgeable (code that
knows the runner's protocol could write a passing report), or limit what it reads of the
system folders.
"""

from graphs.sandbox.limits import Limits, Mode
from graphs.sandbox.result import Check, RunResult, Status, Violation
from graphs.sandbox.sandbox import Sandbox, SandboxError, SandboxUnavailable

__all__ = ["Check", "Limits", "Mode", "RunResult", "Sandbox", "SandboxError", "SandboxUnavailable", "Status",
           "Violation"]
