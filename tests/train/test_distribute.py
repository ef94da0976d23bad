"""train.distribute: --gpu_replicas refused clearly where it cannot split a GPU, and the
automatic --steps_per_loop of this machine."""

import pytest
import tensorflow as tf

from train import distribute
from train.run_config import RunConfig

HAS_GPU = bool(tf.config.list_physical_devices("GPU"))


@pytest.mark.skipif(HAS_GPU, reason="the refusal is for machines without a GPU")
def test_gpu_replicas_without_a_gpu_is_refused_before_anything_is_built():
  with pytest.raises(ValueError, match="--gpu_replicas=2 splits a GPU, but TensorFlow sees none"):
    distribute.check_gpu_replicas(2)
  distribute.check_gpu_replicas(0)  # unset, and one replica, need no GPU
  distribute.check_gpu_replicas(1)


def test_cpu_and_gpu_replicas_together_are_refused():
  with pytest.raises(ValueError, match="give one of them"):
    RunConfig.of(cpu_replicas=2, gpu_replicas=2).check()


def test_the_automatic_steps_per_loop_follows_the_machine():
  expected = distribute.GPU_STEPS_PER_LOOP if HAS_GPU else distribute.CPU_STEPS_PER_LOOP
  assert distribute.default_steps_per_loop(None) == expected
  assert distribute.default_steps_per_loop(7) == 7
