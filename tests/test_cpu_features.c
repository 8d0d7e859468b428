/* CPU feature detection beyond the dispatch levels: the low-precision extensions and the AMX
 * tile permission (src/base/cpu_features.h), and on a CPU that grants AMX, one bf16 tile
 * product checked against plain arithmetic — the tile configuration and the VNNI pair layout
 * that AMX kernels rely on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/cpu_features.h"
#include "eagle/dtype.h"
#include "eagle/runtime.h"

static void test_low_precision_facts_agree(void **state) {
    (void)state;
    const char *reason = NULL;
    bool amx = eg__cpu_amx_usable(&reason);
    assert_non_null(reason);
    assert_true(strlen(reason) > 0);
    /* usable AMX needs the hardware, and every extension here needs usable AVX-512 */
    if (amx) assert_true(eg__cpu_has_amx_bf16());
    if (eg__cpu_has_amx_bf16() || eg__cpu_has_avx512_bf16() || eg__cpu_has_avx512_fp16())
        assert_true(eg__cpu_has_avx512());
    assert_true(eg__cpu_amx_usable(NULL) == amx); /* asked once: the same answer */
    const char *line = eg_cpu_low_precision_info();
    assert_non_null(strstr(line, amx ? "AMX-BF16 tiles usable" : "AMX-BF16 tiles not usable"));
    assert_non_null(strstr(line, reason));
    print_message("%s\n", line);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* The 64-byte tile configuration (palette 1): rows and bytes per row of tiles 0..2. */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* C (16 x 16 f32) = A (16 x 32 bf16) . B (32 x 16 bf16), B given in AMX's pair layout:
 * b_pairs[k / 2][j][k % 2]. */
__attribute__((target("amx-tile,amx-bf16"))) static void
tile_product(const uint16_t *a, const uint16_t *b_pairs, float *c) {
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    config.rows[0] = 16, config.colsb[0] = 64; /* C: 16 rows of 16 f32 */
    config.rows[1] = 16, config.colsb[1] = 64; /* A: 16 rows of 32 bf16 */
    config.rows[2] = 16, config.colsb[2] = 64; /* B: 16 pair-rows of 16 x 2 bf16 */
    _tile_loadconfig(&config);
    _tile_zero(0);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b_pairs, 64);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, c, 64);
    _tile_release();
}

static void test_amx_tile_product(void **state) {
    (void)state;
    const char *reason;
    if (!eg__cpu_amx_usable(&reason)) {
        print_message("AMX not usable here (%s): skipped\n", reason);
        skip();
    }
    uint16_t a[16 * 32], b_pairs[16 * 16 * 2];
    float bf[32][16], af[16][32], c[16 * 16];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 32; k++) {
            af[i][k] = (float)((i * 7 + k * 3) % 11 - 5);
        }
    for (int k = 0; k < 32; k++)
        for (int j = 0; j < 16; j++) {
            bf[k][j] = (float)((k * 5 + j * 13) % 9 - 4);
            /* small integers: exact in bf16, and so are the products and f32 sums */
            eg_f32_to_bf16(&bf[k][j], &b_pairs[(k / 2) * 32 + j * 2 + k % 2], 1);
        }
    eg_f32_to_bf16(&af[0][0], a, 16 * 32);
    tile_product(a, b_pairs, c);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float want = 0;
            for (int k = 0; k < 32; k++) want += af[i][k] * bf[k][j];
            if (c[i * 16 + j] != want)
                fail_msg("C[%d][%d] = %g, want %g", i, j, (double)c[i * 16 + j], (double)want);
        }
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_low_precision_facts_agree),
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        cmocka_unit_test(test_amx_tile_product),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
