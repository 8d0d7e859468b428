/* bench_modes_step MODE STEPS [HIDDEN] [BATCH]: runs the training step of tools/eagle/mlp.c
 * (`eagle bench modes`' step) STEPS times on one fixed synthetic batch in one mode (eager, lazy
 * or graph), 1 thread, and prints the summed loss. Made to be counted by callgrind, where the
 * data set's loading would drown the steps:
 *   valgrind --tool=callgrind bench_modes_step lazy 200
 * The summed loss is the same in every mode (the modes compute the same bits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s eager|lazy|graph STEPS [HIDDEN e.g. 64 or 512,512] [BATCH]\n",
                argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    long steps = atol(argv[2]);
    mlp_config config = {1, {64}};
    if (argc > 3 && !mlp_parse_hidden(argv[3], &config)) return 2;
    int64_t batch = argc > 4 ? atol(argv[4]) : 32;
    bool lazy = !strcmp(mode, "lazy"), graph = !strcmp(mode, "graph");
    if (!lazy && !graph && strcmp(mode, "eager")) return 2;
    eg_set_num_threads(1);
    eg_manual_seed(42);
    mlp_step_state s = {mlp_build(&config), eg_adam_new(NULL)};
    int64_t x_shape[2] = {batch, 784};
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, x_shape, 0.0, 1.0);
    int64_t *labels = malloc(sizeof *labels * (size_t)batch);
    for (int64_t i = 0; i < batch; i++) labels[i] = (i * 7) % 10;
    eg_tensor *y = eg_tensor_from_data(labels, EG_DTYPE_I64, 1, &batch);
    eg_function *f = graph ? eg_function_new("train_step", mlp_step, 2, 2, &s) : NULL;
    if (!s.model || !s.optimizer || !x || !y || (graph && !f)) {
        fprintf(stderr, "set-up failed: %s\n", eg_last_error());
        return 1;
    }
    double total = 0;
    for (long step = 0; step < steps; step++) {
        eg_scope_begin();
        const eg_tensor *in[2] = {x, y};
        eg_tensor *out[2] = {NULL, NULL};
        eg_status status;
        if (graph) {
            status = eg_function_call(f, in, out);
        } else {
            if (lazy) eg_lazy_begin();
            status = mlp_step(in, out, &s);
            if (lazy) eg_lazy_end();
        }
        if (status == EG_OK) total += eg_item(out[0]);
        eg_scope_end();
        if (status != EG_OK) {
            fprintf(stderr, "step %ld: %s\n", step, eg_last_error());
            return 1;
        }
    }
    printf("%s: %ld steps, summed loss %.6f\n", mode, steps, total);
    eg_function_free(f);
    eg_release(x);
    eg_release(y);
    free(labels);
    eg_optimizer_free(s.optimizer);
    eg_model_free(s.model);
    return 0;
}
