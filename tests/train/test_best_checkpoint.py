"""train/best_checkpoint.py: the best weights by a metric that improves upward or downward."""

import pytest
import tensorflow as tf

from tfattn.kinds import HIGHER, LOWER
from train.best_checkpoint import BestCheckpoint


def _kept(tmp_path, direction, values):
  weight = tf.Variable(0.0)
  model = tf.Module()
  model.weight = weight
  best = BestCheckpoint(model, str(tmp_path / direction), "metric", direction)
  kept = []
  for step, value in enumerate(values, 1):
    weight.assign(float(step))
    if best.offer({"metric": value}, step):
      kept.append(step)
  weight.assign(-1.0)
  best.restore()
  return kept, float(weight.numpy())


def test_higher_and_lower_is_better_keep_their_own_best(tmp_path):
  values = [3.0, 5.0, 4.0, 2.0]
  assert _kept(tmp_path, HIGHER, values) == ([1, 2], 2.0)  # accuracy: 5.0 at step 2
  assert _kept(tmp_path, LOWER, values) == ([1, 4], 4.0)  # perplexity: 2.0 at step 4


@pytest.mark.slow  # trains a tiny run in this process
@pytest.mark.parametrize(
  "accuracies, judged_again",
  [([0.2, 0.6], False), ([0.6, 0.2], True)],
  ids=["the_last_weights_win", "earlier_weights_win"],
)
def test_the_final_validation_judges_restored_weights_and_reuses_the_last_ones(
  tmp_path, monkeypatch, accuracies, judged_again
):
  """--keep_best_by with validation at steps 2 and 4 (token accuracies scripted over the real
  evaluation): when the last weights win, the final evaluation takes their judgement of a
  moment ago instead of decoding validation again; when earlier ones win, it judges them after
  restoring them. The test set is judged once either way."""
  from train.trainer import Trainer, prepare

  from train_helpers import SMALL_CONFIG

  config = SMALL_CONFIG.replace(
    run_dir=str(tmp_path / "run"),
    train_steps=4,
    eval_every=2,
    keep_best_by="token_accuracy",
    attention_images=0,
    eval_examples=8,
    test_examples=8,
  )
  calls = []
  evaluate = Trainer.evaluate

  def scripted(self, dataset=None, max_examples=-1):
    metrics = evaluate(self, dataset, max_examples)
    role = "validation" if dataset is None else "test"
    if role == "validation" and len(calls) < len(accuracies):
      metrics["token_accuracy"] = accuracies[len(calls)]
    calls.append((role, self.step, metrics["token_accuracy"]))
    return metrics

  monkeypatch.setattr(Trainer, "evaluate", scripted)
  result = Trainer(*prepare(config)).run()
  roles = [(role, step) for role, step, _ in calls]
  again = [("validation", 4)] if judged_again else []
  assert roles == [("validation", 2), ("validation", 4), *again, ("test", 4)]
  assert result["validation"]["token_accuracy"] == calls[-2][2]  # the final weights' judgement
  best_step = 2 if judged_again else 4
  assert result["weights"]["checkpoints"] == [f"best/best-{best_step}"]
