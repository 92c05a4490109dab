"""One worker of a user's own MWMS program on ``trainer.input`` (run by tests/trainer/test_input_workers.py).

``python input_worker.py custom|fit DATA CKPT_DIR LOG STOP``: trains the ``id``-logging model below
for the input's epochs, from the checkpoint in CKPT_DIR if there is one, until global step STOP
(0: the end), saves a checkpoint there and prints ``worker I: steps N`` and the final loss. The
model's ``IdTap`` layer appends the record ids of every batch it trains on to ``LOG-w<I>.ids``,
one line per step, so the test sees which records each worker trained on at each step, fit or not.
Settings as environment variables: ``GLOBAL_BATCH``, ``EPOCHS``, ``SEED``.
"""
from __future__ import annotations

import json
import os
import sys

import keras
import tensorflow as tf

import trainer.input

FEATURES = ("x0", "x1", "x2", "x3", "id")


class IdTap(keras.layers.Layer):
    """Writes the batch's ids to a file when the step runs; outputs zeros."""

    def __init__(self, path: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.log_path = path

    def call(self, ids):
        printed = tf.print(ids, output_stream=f"file://{self.log_path}", summarize=-1)
        with tf.control_dependencies([printed]):
            return tf.zeros([tf.shape(ids)[0], 1])


def build_model(log: str, classes: int) -> keras.Model:
    inputs = {name: keras.Input(shape=(), dtype="int64" if name == "id" else "float32", name=name) for name in FEATURES}
    x = keras.layers.Concatenate()([keras.layers.Reshape((1,))(inputs[n]) for n in FEATURES[:-1]])
    x = keras.layers.Dense(8, activation="relu")(x)
    tap = IdTap(log)(inputs["id"])
    return keras.Model(inputs, keras.layers.Dense(classes)(keras.layers.Concatenate()([x, tap])))


def main(mode: str, data: str, ckpt_dir: str, log: str, stop: int) -> int:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    inp = trainer.input.open(data, label="label", features=FEATURES, global_batch_size=int(os.environ["GLOBAL_BATCH"]),
                             seed=int(os.environ.get("SEED", "7")), shuffle=64, epochs=int(os.environ["EPOCHS"]))
    with strategy.scope():
        model = build_model(f"{log}-w{worker}.ids", inp.num_classes)
        optimizer = keras.optimizers.SGD(0.05)
        optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, input=inp.state)
    latest = tf.train.latest_checkpoint(ckpt_dir)
    if latest:
        checkpoint.restore(latest)
    step = start = int(optimizer.iterations.numpy())
    stop = stop or inp.total_steps
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    loss = float("nan")
    if mode == "fit":
        model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=False)
        while step < stop:
            epoch = step // inp.steps_per_epoch
            steps = min(stop, (epoch + 1) * inp.steps_per_epoch) - step
            with inp.keras_fit_scope(model, strategy):
                history = model.fit(inp.distribute(strategy, start_step=step, epoch=epoch), epochs=1,
                                    steps_per_epoch=steps, verbose=0)
            step += steps
            loss = history.history["loss"][-1]
    else:
        @tf.function
        def train_step(batch):
            def replica_step(features, labels):
                with tf.GradientTape() as tape:
                    per_example = loss_fn(labels, model(features, training=True))
                    loss = tf.nn.compute_average_loss(per_example, global_batch_size=inp.global_batch_size)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

        while step < stop:
            for batch in inp.distribute(strategy, start_step=step, epoch=step // inp.steps_per_epoch):
                loss = float(train_step(batch))
                step += 1
                if step == stop:
                    break
    manager = tf.train.CheckpointManager(checkpoint, ckpt_dir if worker == 0 else f"{ckpt_dir}-w{worker}", max_to_keep=1)
    manager.save(checkpoint_number=step)
    print(f"worker {worker}: steps {step - start} from {start} to {step}, loss {loss:.4f}", flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
