"""Session fixtures built once for the whole `make test`, not once per test process: the first
xdist worker that asks builds (a run directory, an export: seconds each), the other waits for it
and reuses what it built. The tests only read what these fixtures return (a test that changes
one copies it first), so sharing it across processes changes no result."""

import fcntl
import os
import pickle

# This process's builds, by name: a fixture imported into several test modules is a separate
# fixture in each, and the second must not build again.
_BUILT = {}


def built_once(tmp_path_factory, name: str, build):
  """`build()`'s result (paths: picklable), built once per session under `name`.

  Under xdist every worker's base temporary directory sits in one folder of this session
  (`pytest-N/popen-gwK`): the result is pickled there under a lock. Without xdist that folder
  holds earlier sessions too, so the process builds for itself."""
  if name in _BUILT:
    return _BUILT[name]
  if not os.environ.get("PYTEST_XDIST_WORKER"):
    _BUILT[name] = build()
    return _BUILT[name]
  session_dir = tmp_path_factory.getbasetemp().parent
  with open(session_dir / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
    done = session_dir / f"{name}.pickle"
    if done.exists():
      _BUILT[name] = pickle.loads(done.read_bytes())
    else:
      _BUILT[name] = build()
      temporary = done.with_suffix(".tmp")
      temporary.write_bytes(pickle.dumps(_BUILT[name]))
      os.replace(temporary, done)  # whole or absent, whichever worker reads it
  return _BUILT[name]
