"""The MWMS field guide's custom training loop on a shardprep data set, through ``trainer.input``.

Run it on 3 local workers (each gets its own TF_CONFIG from the launcher):

    python -m trainer.launch --workers 3 -- python examples/custom_loop.py --data DIR --label label

Every worker takes the same number of steps (``trainer.input`` proves it before any collective, for
any worker count over any shard count); the loss is averaged over the global batch
(``tf.nn.compute_average_loss``), as the guide does. Each worker prints its steps and final loss.
"""
from __future__ import annotations

import argparse

import keras
import tensorflow as tf

import trainer.input


def build_model(spec: dict[str, tf.TensorSpec], num_classes: int) -> keras.Model:
    """Every feature flattened to floats, one hidden layer, logits."""
    inputs = {name: keras.Input(shape=s.shape[1:], dtype=s.dtype, name=name) for name, s in spec.items()}
    flat = [keras.layers.Reshape((-1,))(keras.ops.cast(x, "float32")) for x in inputs.values()]
    hidden = keras.layers.Dense(32, activation="relu")(keras.layers.Concatenate()(flat))
    return keras.Model(inputs, keras.layers.Dense(num_classes)(hidden))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a shardprep data set (folder or URL)")
    p.add_argument("--label", default="label", help="an int64 class id or string label")
    p.add_argument("--global-batch", type=int, default=24, help="examples per step over all workers")
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()

    # Planned before TensorFlow connects the workers: a batch that cannot balance fails here, on every worker.
    inp = trainer.input.open(args.data, label=args.label, global_batch_size=args.global_batch, epochs=args.epochs)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = strategy.cluster_resolver.task_id or 0
    features_spec, _ = inp.batch_spec(strategy)
    with strategy.scope():
        model = build_model(features_spec, inp.num_classes)
        optimizer = keras.optimizers.Adam(1e-2)

    def train_step(features: dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=inp.global_batch_size)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def distributed_step(features: dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
        per_replica = strategy.run(train_step, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    steps, loss = 0, float("nan")
    for features, labels in inp.distribute(strategy):  # ends after --epochs epochs
        loss = float(distributed_step(features, labels))
        steps += 1
    print(f"worker {worker}: {steps} steps ({inp.steps_per_epoch} per epoch x {args.epochs}), final loss {loss:.4f}",
          flush=True)


if __name__ == "__main__":
    main()
