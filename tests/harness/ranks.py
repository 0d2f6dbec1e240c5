"""Helpers shared by the Python harnesses of tests/plugin and tests/reach."""

import subprocess


def wait_all(procs, timeout):
    """(returncode, output) of each started process; one still running after `timeout` seconds
    is killed (its returncode is then the signal's)."""
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append((p.returncode, out))
    return outs
