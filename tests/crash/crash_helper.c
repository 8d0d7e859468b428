/* Helper of test_crash_safety.sh:
 *   crash_helper data DIR N     writes a tiny random MNIST-shaped data set (N train, N test
 *                               examples, plain IDX files) into DIR
 *   crash_helper check FILE     opens FILE as a safetensors checkpoint of `eagle train` and
 *                               reads every tensor; exit 0 when all is well, 1 (with the reason)
 *                               when anything is missing, malformed or unreadable */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

static void put_be32(FILE *f, uint32_t x) {
    unsigned char b[4] = {(unsigned char)(x >> 24), (unsigned char)(x >> 16),
                          (unsigned char)(x >> 8), (unsigned char)x};
    fwrite(b, 1, 4, f);
}

static int write_split(const char *dir, const char *split, uint32_t n, uint32_t *state) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, split);
    FILE *images = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, split);
    FILE *labels = fopen(path, "wb");
    if (!images || !labels) {
        perror(path);
        return 1;
    }
    put_be32(images, 0x00000803);
    put_be32(images, n);
    put_be32(images, 28);
    put_be32(images, 28);
    put_be32(labels, 0x00000801);
    put_be32(labels, n);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char label = (unsigned char)(i % 10);
        fputc(label, labels);
        for (int p = 0; p < 784; p++) { /* a class-dependent pattern plus noise */
            *state = *state * 1664525u + 1013904223u;
            int value = ((p / 28 + p % 28 + 7 * label) % 10) * 20 + (int)(*state >> 28);
            fputc(value, images);
        }
    }
    int failed = ferror(images) || ferror(labels);
    failed |= fclose(images) != 0;
    failed |= fclose(labels) != 0;
    return failed;
}

static int check(const char *path) {
    eg_safetensors *file = eg_safetensors_open(path);
    if (!file) {
        fprintf(stderr, "check: %s\n", eg_last_error());
        return 1;
    }
    int rc = 0;
    const char *epoch = eg_safetensors_metadata(file, "eagle.epoch");
    const char *iterations = eg_safetensors_metadata(file, "eagle.optimizer.iterations");
    int n = eg_safetensors_count(file);
    if (!epoch || atoi(epoch) < 1 || !iterations || n < 4) {
        fprintf(stderr, "check: %s: not a complete checkpoint (epoch %s, %d tensors)\n", path,
                epoch ? epoch : "missing", n);
        rc = 1;
    }
    int slots = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *name = eg_safetensors_name(file, i);
        eg_tensor *t = eg_safetensors_get(file, name);
        if (!t) {
            fprintf(stderr, "check: %s\n", eg_last_error());
            rc = 1;
        }
        slots += strncmp(name, "optimizer/", 10) == 0;
        eg_release(t);
    }
    if (rc == 0 && slots != 2 * (n - slots)) { /* Adam: momentum and velocity per variable */
        fprintf(stderr, "check: %s: %d optimizer slots for %d variables\n", path, slots, n - slots);
        rc = 1;
    }
    eg_safetensors_close(file);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "data")) {
        uint32_t state = 12345, n = (uint32_t)atoi(argv[3]);
        return write_split(argv[2], "train", n, &state) || write_split(argv[2], "t10k", n, &state);
    }
    if (argc == 3 && !strcmp(argv[1], "check")) return check(argv[2]);
    fprintf(stderr, "usage: crash_helper data DIR N | check FILE\n");
    return 2;
}
