/* eg_shutdown gives back what the library holds for its own reuse on the calling thread — the
 * product's packing buffers, the freed tensors' headers, the pools' cached blocks — so that a
 * leak checker run after it sees only the host allocator's bookkeeping (a few KiB; kept so that
 * tensors still alive stay valid). Measured with glibc's mallinfo2: the heap in use after
 * shutdown, against before the first call. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <malloc.h>

#include "eagle.h"

static size_t heap_in_use(void) {
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static void test_shutdown_leaves_only_bookkeeping(void **state) {
    (void)state;
    size_t before = heap_in_use();
    eg_set_num_threads(1); /* the products run on this thread: its buffers are the ones kept */
    for (int round = 0; round < 2; round++) { /* the second: everything is made again */
        eg_tensor *a = eg_random_normal(NULL, EG_DTYPE_F32, 2, (int64_t[]){256, 256}, 0, 1);
        eg_tensor *b = eg_matmul(a, a);
        eg_tensor *c = eg_relu(b);
        assert_non_null(c);
        size_t during = heap_in_use();
        eg_release(a);
        eg_release(b);
        eg_release(c);
        eg_shutdown();
        size_t after = heap_in_use();
        print_message("heap in use: %zu bytes before, %zu during, %zu after eg_shutdown\n", before,
                      during, after);
        if (during == before) skip(); /* an allocator mallinfo2 cannot see (sanitizers) */
        assert_true(during - before > (size_t)1 << 20); /* the packing buffers, the results */
        assert_true(after - before < (size_t)64 << 10);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_shutdown_leaves_only_bookkeeping)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
