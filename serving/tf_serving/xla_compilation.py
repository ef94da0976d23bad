"""TensorFlow's process-wide XLA compilation switch, the one `tensorflow_model_server` sets.

TF Serving's main.cc (tensorflow/serving 9d981c5, lines 337-339) calls
`tensorflow::DisableXlaCompilation()` unless `--xla_cpu_compilation_enabled` or
`--xla_gpu_compilation_enabled` is true. From then on every XLA compilation in the process
returns INTERNAL "XLA compilation disabled" (tensorflow/compiler/jit/device_compiler.h, TF
2.21.0 line 534), so a SavedModel function marked `jit_compile=True` fails where it would
compile: in the version's warm-up (the version does not load) or in the first request.

TensorFlow's Python API does not expose the switch, but libtensorflow_cc exports it (the C++
functions `tensorflow::DisableXlaCompilation/EnableXlaCompilation/FailOnXlaCompilation`), so it
is called here through ctypes: TensorFlow itself then refuses, with its own status and text.
The switch is global to the process, as in TF Serving: only `python -m serving.server` (a
process that only serves) sets it; code that loads models in a process of its own choosing
(tests, benchmarks) leaves it alone.
"""

import ctypes
import glob
import os

# Itanium-ABI names of tensorflow::DisableXlaCompilation(), EnableXlaCompilation() and
# FailOnXlaCompilation() (tensorflow/compiler/jit/flags.h).
_DISABLE = "_ZN10tensorflow21DisableXlaCompilationEv"
_ENABLE = "_ZN10tensorflow20EnableXlaCompilationEv"
_FAILS = "_ZN10tensorflow20FailOnXlaCompilationEv"


class SwitchMissing(RuntimeError):
  """This TensorFlow build does not export the switch."""


def _library():
  """The loaded libtensorflow_cc (importing TensorFlow loaded it; dlopen returns that copy)."""
  import tensorflow as tf

  directory = os.path.dirname(tf.__file__)
  found = sorted(glob.glob(os.path.join(directory, "libtensorflow_cc.so*"))) + sorted(
    glob.glob(os.path.join(directory, "libtensorflow_cc*.dylib"))
  )
  for path in found:
    library = ctypes.CDLL(path)
    if all(hasattr(library, name) for name in (_DISABLE, _ENABLE, _FAILS)):
      return library
  raise SwitchMissing(
    f"TensorFlow {tf.__version__} exports no tensorflow::DisableXlaCompilation in "
    f"{directory}/libtensorflow_cc*"
  )


def set_enabled(enabled):
  """Lets XLA compile in this process (True) or makes every compilation fail as TF Serving's
  default does (False). Raises SwitchMissing where TensorFlow lacks the switch."""
  library = _library()
  getattr(library, _ENABLE if enabled else _DISABLE)()


def is_enabled():
  """False once compilation was disabled in this process (and not enabled again)."""
  fails = getattr(_library(), _FAILS)
  fails.restype = ctypes.c_bool
  return not fails()


def enabled_by_flags(xla_cpu_compilation_enabled, xla_gpu_compilation_enabled):
  """main.cc:337: either flag leaves compilation on (the GPU flag's help says it enables
  XLA:CPU and XLA:GPU; the CPU flag alone also lifts the switch on every device)."""
  return bool(xla_cpu_compilation_enabled or xla_gpu_compilation_enabled)


CPU_FLAG = "--xla_cpu_compilation_enabled=true"
GPU_FLAG = "--xla_gpu_compilation_enabled=true"
# What each TF Serving build needs to serve an export holding functions that must compile:
# the CPU flag exists since 2.5.0; the GPU flag and XLA:GPU in the GPU binary since 2.18.0
# (tensorflow/serving e5e795f); GPU builds before it fail with "Could not find compiler for
# platform CUDA" (tensorflow/serving#2214, #2217).
TF_SERVING_NEEDS = (
  f"TF Serving CPU images (any version) need {CPU_FLAG}, GPU images >= 2.18 need {GPU_FLAG}, "
  "GPU images <= 2.17 cannot serve it"
)
