/* The C side of the TensorBoard interop test (tests/interop/run.sh --tensorboard): writes one
 * event file into LOGDIR for tests/interop/check_tensorboard.py to read with TensorBoard's
 * EventAccumulator. The values are mirrored in check_tensorboard.py:
 *   scalars    "train/loss"      steps 0..9, value 1 / (step + 1)
 *              "train/accuracy"  steps 0..9, value step / 8 (exact in float)
 *   histograms "dense/kernel"    step 3: f32 (6, 5) tensor, values (i - 12) / 4, i = 0..29,
 *                                step 7: the same times 2, as a transposed view
 *              "dense/bias"      step 3: f64 [0.5, 1.5, 1.5, 1e-13, -7e5]
 *   scalar     "lr"              step 123456789012 (beyond 32 bits), value 0.001
 *
 *   eagle_summary_demo LOGDIR   prints the event file's path; exit status 0, or 1 with the error */
#include <stdio.h>

#include "eagle.h"

static int check(eg_status status, const char *what) {
    if (status == EG_OK) return 0;
    fprintf(stderr, "eagle_summary_demo: %s: %s\n", what, eg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: eagle_summary_demo LOGDIR\n");
        return 2;
    }
    eg_summary_writer *w = eg_summary_writer_new(argv[1]);
    if (!w) return check(eg_last_status(), "eg_summary_writer_new");
    int failures = 0;
    eg_scope_begin(); /* releases the tensors below */
    for (int step = 0; step < 10; step++) {
        failures += check(eg_summary_scalar(w, "train/loss", step, 1.0 / (step + 1)), "loss");
        failures += check(eg_summary_scalar(w, "train/accuracy", step, step / 8.0), "accuracy");
    }

    float kernel[30];
    for (int i = 0; i < 30; i++) kernel[i] = (float)(i - 12) / 4.0f;
    eg_tensor *t = eg_tensor_from_data(kernel, EG_DTYPE_F32, 2, (int64_t[]){6, 5});
    failures += check(eg_summary_histogram(w, "dense/kernel", 3, t), "kernel 3");
    eg_tensor *doubled = eg_mul(t, eg_scalar(EG_DTYPE_F32, 2.0));
    eg_tensor *view = eg_transpose(doubled, 0, 1);
    failures += check(eg_summary_histogram(w, "dense/kernel", 7, view), "kernel 7");
    const double bias[5] = {0.5, 1.5, 1.5, 1e-13, -7e5};
    eg_tensor *b = eg_tensor_from_data(bias, EG_DTYPE_F64, 1, (int64_t[]){5});
    failures += check(eg_summary_histogram(w, "dense/bias", 3, b), "bias");

    /* A step beyond 32 bits. Steps need not grow across tags: with file_version "brain.Event:2"
     * TensorBoard purges events only after a SessionLog START, never for a smaller step. */
    failures += check(eg_summary_scalar(w, "lr", 123456789012LL, 0.001), "lr");
    failures += check(eg_summary_flush(w), "flush");
    printf("%s\n", eg_summary_writer_path(w));
    eg_summary_writer_free(w);
    failures += check(eg_last_status(), "eg_summary_writer_free");
    failures += check(eg_scope_end(), "eg_scope_end");
    return failures ? 1 : 0;
}
