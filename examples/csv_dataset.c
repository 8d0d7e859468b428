/* A dataset from a CSV file (tf.data's experimental.make_csv_dataset, in C with Eagle):
 *   1. writes a small CSV file with a header row: a class label (an integer) and two
 *      measurements per row, three classes around three centers, plus one malformed row;
 *   2. reads it with eg_dataset_from_csv_with_info: the header's names, the label column read
 *      as i32 while the features are f32, and the malformed row skipped (and reported) instead
 *      of failing the read, as tf.data's ignore_errors does;
 *   3. shuffles and batches it, and trains a small Dense classifier on it with eg_model_fit.
 * Build: see examples/CMakeLists.txt. Run: ./csv_dataset [rows] [epochs] (default 300 rows,
 * 20 epochs). Prints "train accuracy" at the end; exits non-zero when anything fails. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen */
#include <eagle.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* A uniform draw in [0, 1) from a small generator of our own, so the file is the same
 * everywhere. */
static double uniform(uint64_t *state) {
    *state = *state * 6364136223846793005u + 1442695040888963407u;
    return (double)(*state >> 11) / 9007199254740992.0;
}

/* rows points around the centers (class c around centers[c]), one malformed row among them. */
static int write_csv(FILE *f, int rows) {
    static const double centers[3][2] = {{0, 0}, {3, 0}, {1.5, 2.5}};
    uint64_t state = 42;
    fprintf(f, "species,length,width\n");
    for (int i = 0; i < rows; i++) {
        int c = i % 3;
        double length = centers[c][0] + uniform(&state) * 2 - 1;
        double width = centers[c][1] + uniform(&state) * 2 - 1;
        fprintf(f, "%d,%.4f,%.4f\n", c, length, width);
        if (i == rows / 2) fprintf(f, "1,not a number,0.5\n"); /* skipped by the reader */
    }
    return fclose(f);
}

int main(int argc, char **argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 300;
    int epochs = argc > 2 ? atoi(argv[2]) : 20;
    char path[] = "/tmp/eagle-csv-example-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f || write_csv(f, rows) != 0) {
        perror(path);
        return 1;
    }

    eg_csv_options csv = eg_csv_options_default();
    csv.header = true;
    csv.dtype = EG_DTYPE_F32;       /* the features */
    csv.label_column = 0;           /* "species" ... */
    csv.label_dtype = EG_DTYPE_I32; /* ... read as integers */
    csv.skip_malformed_rows = true;
    eg_csv_info info;
    eg_dataset *data = eg_dataset_from_csv_with_info(path, &csv, &info);
    remove(path); /* read now: the dataset no longer needs the file */
    if (!data) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    printf("%lld rows of %lld columns:", (long long)info.rows, (long long)info.columns);
    for (int64_t i = 0; i < info.columns; i++) printf(" %s", info.column_names[i]);
    printf("\nskipped %lld malformed row(s), the first on line %lld\n",
           (long long)info.skipped_rows, (long long)info.first_skipped_line);
    bool skipped_one = info.skipped_rows == 1;
    eg_csv_info_free(&info);

    /* Elements are (features f32 (2,), label i32 ()); fit wants batches of them. */
    data = eg_dataset_batch(eg_dataset_shuffle(data, rows, 1, true), 16, false);

    eg_manual_seed(42);
    eg_model *model = eg_sequential_new("csv_classifier");
    eg_sequential_add(model, eg_dense_new(16, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(3, EG_ACTIVATION_NONE));
    eg_model_build(model, 2, (int64_t[]){-1, 2});
    eg_adam_options adam_options = eg_adam_options_default();
    adam_options.learning_rate = eg_schedule_constant(0.01);
    eg_optimizer *adam = eg_adam_new(&adam_options);
    eg_compile_options compile = {
        .loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .from_logits = true, .accuracy = true};
    eg_fit_options options = eg_fit_options_default();
    options.epochs = epochs;
    options.verbose = 0;
    eg_history *history = data && eg_model_compile(model, adam, &compile) == EG_OK
                              ? eg_model_fit(model, data, &options)
                              : NULL;
    if (!history) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    int n = 0;
    const double *loss = eg_history_values(history, "loss", &n);
    const double *accuracy = eg_history_values(history, "accuracy", &n);
    printf("epoch 1: loss %.4f accuracy %.4f\n", loss[0], accuracy[0]);
    printf("epoch %d: loss %.4f train accuracy %.4f\n", n, loss[n - 1], accuracy[n - 1]);
    int status = skipped_one && isfinite(loss[n - 1]) ? 0 : 1;

    eg_history_free(history);
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_dataset_free(data);
    return status;
}
