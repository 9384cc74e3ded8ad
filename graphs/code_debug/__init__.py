"""code-debug: a fixer repairs a buggy Python function from its failing tests; a judge runs
the tests on the fix in the sandbox (graphs.sandbox). The bug comes with the task, or a
breaker writes it into the task's correct reference solution."""
