"""TensorFlow eager doing what `eagle train` does: the same MLP (tf.keras Dense layers, Keras'
default glorot_uniform kernels and zero biases), Adam with Keras' defaults, the same batches in the
same order, a plain tf.GradientTape loop; prints eagle train's lines. --function wraps the step in
tf.function (graph mode), for comparison only."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import fashion  # noqa: E402


def main():
    args = fashion.parse_args(__doc__, lambda p: p.add_argument(
        "--function", action="store_true", help="run the step as a tf.function (graph mode)"))
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(args.seed)
    train_x, train_y = fashion.load(True, args.limit)
    test_x, test_y = fashion.load(False)
    train_x, train_y = tf.constant(train_x), tf.constant(train_y)
    test_x, test_y = tf.constant(test_x), tf.constant(test_y)

    model = tf.keras.Sequential(
        [tf.keras.Input((784,))]
        + [tf.keras.layers.Dense(h, activation="relu") for h in args.hidden]
        + [tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-7)
    variables = model.trainable_variables

    def step_body(indices):
        x = tf.cast(tf.gather(train_x, indices), tf.float32) * (1.0 / 255.0)
        y = tf.gather(train_y, indices)
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        hits = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        return loss, hits

    if args.function:
        step_body = tf.function(step_body,
                                input_signature=[tf.TensorSpec([None], tf.int64)])

    def step(indices):
        loss, hits = step_body(tf.constant(indices))
        return float(loss), float(hits)

    def evaluate():
        hits = loss = 0.0
        n = int(test_y.shape[0])
        for s in range(0, n, 1000):
            x = tf.cast(test_x[s:s + 1000], tf.float32) * (1.0 / 255.0)
            y = test_y[s:s + 1000]
            logits = model(x, training=False)
            loss += float(tf.reduce_sum(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)))
            hits += float(tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32)))
        return hits / n, loss / n

    mode = "tf.function" if args.function else "eager"
    fashion.train(args, f"tensorflow {tf.__version__} {mode}", step, evaluate,
                  int(train_y.shape[0]))


if __name__ == "__main__":
    main()
