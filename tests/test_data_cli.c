/* `eagle train`'s input pipeline (tools/eagle/pipeline.c): its batches are bitwise the batches
 * train.c builds with mlp_batch over its own shuffle (copied below from train.c, so that a change
 * to either shows here), for several epochs, a first epoch other than 1 (a resumed run) and a
 * batch size that does not divide the data; and with augmentation the pass is the same whatever
 * the parallelism (a second build of the pipeline) and only flips and shifts images. Runs under
 * ThreadSanitizer in CI (label "threads"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

/* The CLI's sources, compiled into this test. */
#include "../tools/eagle/mlp.c"
#include "../tools/eagle/pipeline.c"

/* train.c's shuffle, verbatim. */
static void train_c_shuffle(int64_t *order, int64_t n, unsigned long long seed, int epoch) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        int64_t j = (int64_t)(z % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static mlp_data synthetic_data(int64_t n) {
    eg_generator *g = eg_generator_new(3);
    int64_t shape[3] = {n, 28, 28};
    mlp_data data;
    data.images = eg_cast(eg_mul_scalar(eg_random_uniform(g, EG_DTYPE_F32, 3, shape, 0, 1), 255.9),
                          EG_DTYPE_U8);
    data.labels = eg_cast(eg_mul_scalar(eg_random_uniform(g, EG_DTYPE_F32, 1, shape, 0, 1), 9.9),
                          EG_DTYPE_U8);
    data.n = n;
    eg_generator_free(g);
    return data;
}

static void assert_bitwise(const eg_tensor *a, const eg_tensor *b) {
    assert_int_equal(eg_tensor_dtype(a), eg_tensor_dtype(b));
    assert_int_equal(eg_tensor_n_dims(a), eg_tensor_n_dims(b));
    for (int d = 0; d < eg_tensor_n_dims(a); d++)
        assert_int_equal(eg_tensor_shape(a)[d], eg_tensor_shape(b)[d]);
    size_t n = (size_t)eg_tensor_n_elems(a) * eg_dtype_size(eg_tensor_dtype(a));
    uint8_t *x = malloc(n + 1), *y = malloc(n + 1);
    assert_int_equal(eg_tensor_copy_to_host(a, x, n), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(b, y, n), EG_OK);
    assert_memory_equal(x, y, n);
    free(x);
    free(y);
}

static void test_bitwise_as_train_c(void **state) {
    (void)state;
    enum { N = 203, BATCH = 32 };
    eg_scope_begin();
    mlp_data data = synthetic_data(N);
    int64_t order[N];
    for (int first_epoch = 1; first_epoch <= 3; first_epoch += 2) {
        bool images = first_epoch == 3; /* the CNN's (B, 28, 28, 1) batches: the same bits */
        eg_dataset *ds = cli_training_pipeline(&data, BATCH, 42, false, images, first_epoch);
        assert_non_null(ds);
        for (int epoch = first_epoch; epoch < first_epoch + 2; epoch++) {
            train_c_shuffle(order, N, 42, epoch);
            eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
            int64_t steps = (N + BATCH - 1) / BATCH;
            for (int64_t step = 0; step < steps; step++) {
                eg_scope_begin();
                eg_element batch;
                bool end;
                assert_int_equal(eg_dataset_iterator_next(it, &batch, &end), EG_OK);
                assert_false(end);
                int64_t start = step * BATCH, n = N - start < BATCH ? N - start : BATCH;
                eg_tensor *x, *y;
                assert_int_equal(mlp_batch(&data, order + start, n, &x, &y), EG_OK);
                int64_t image[4] = {n, 28, 28, 1};
                if (images) x = eg_reshape(x, 4, image);
                assert_bitwise(x, batch.tensors[0]);
                assert_bitwise(y, batch.tensors[1]);
                eg_scope_end();
            }
            eg_element batch;
            bool end;
            assert_int_equal(eg_dataset_iterator_next(it, &batch, &end), EG_OK);
            assert_true(end);
            eg_dataset_iterator_free(it);
        }
        eg_dataset_free(ds);
    }
    mlp_data_free(&data);
    eg_scope_end();
}

static void test_augmented(void **state) {
    (void)state;
    enum { N = 70, BATCH = 16 };
    eg_scope_begin();
    mlp_data data = synthetic_data(N);
    eg_dataset *a = cli_training_pipeline(&data, BATCH, 7, true, false, 1);
    eg_dataset *b = cli_training_pipeline(&data, BATCH, 7, true, false, 1);
    int64_t order[N];
    train_c_shuffle(order, N, 7, 1);
    eg_dataset_iterator *ia = eg_dataset_iterator_new(a), *ib = eg_dataset_iterator_new(b);
    int64_t seen = 0, changed = 0;
    for (;;) {
        eg_scope_begin();
        eg_element ea, eb;
        bool end_a, end_b;
        assert_int_equal(eg_dataset_iterator_next(ia, &ea, &end_a), EG_OK);
        assert_int_equal(eg_dataset_iterator_next(ib, &eb, &end_b), EG_OK);
        assert_int_equal(end_a, end_b);
        if (end_a) {
            eg_scope_end();
            break;
        }
        assert_bitwise(ea.tensors[0], eb.tensors[0]);
        assert_bitwise(ea.tensors[1], eb.tensors[1]);
        int64_t n = eg_tensor_dim(ea.tensors[1], 0);
        assert_int_equal(eg_tensor_dim(ea.tensors[0], 1), 784);
        /* Labels follow train.c's order; images are those images, maybe flipped and shifted. */
        eg_tensor *x, *y;
        assert_int_equal(mlp_batch(&data, order + seen, n, &x, &y), EG_OK);
        assert_bitwise(y, ea.tensors[1]);
        const float *augmented = eg_tensor_data(ea.tensors[0]), *plain = eg_tensor_data(x);
        for (int64_t i = 0; i < n; i++)
            changed += memcmp(augmented + i * 784, plain + i * 784, 784 * sizeof(float)) != 0;
        seen += n;
        eg_scope_end();
    }
    assert_int_equal(seen, N);
    assert_true(changed > N / 2); /* 3/4 flipped or shifted, about */
    eg_dataset_iterator_free(ia);
    eg_dataset_iterator_free(ib);
    eg_dataset_free(a);
    eg_dataset_free(b);
    mlp_data_free(&data);
    eg_scope_end();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise_as_train_c),
        cmocka_unit_test(test_augmented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
