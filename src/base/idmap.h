/* Internal: an open-addressing map from tensor ids (never 0) to pointers (tapes, lazy plans,
 * optimizers). */
#ifndef EAGLE_SRC_BASE_IDMAP_H
#define EAGLE_SRC_BASE_IDMAP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct eg__idmap {
    uint64_t *keys; /* 0 = empty slot */
    void **values;
    size_t capacity; /* a power of two, or 0 */
    size_t count;
} eg__idmap;

static inline size_t eg__idmap_slot(uint64_t key, size_t capacity) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (capacity - 1);
}

static inline void **eg__idmap_find(const eg__idmap *map, uint64_t key) {
    if (!map->capacity) return NULL;
    for (size_t i = eg__idmap_slot(key, map->capacity);; i = (i + 1) & (map->capacity - 1)) {
        if (map->keys[i] == key) return &map->values[i];
        if (map->keys[i] == 0) return NULL;
    }
}

static inline void *eg__idmap_get(const eg__idmap *map, uint64_t key) {
    void **value = eg__idmap_find(map, key);
    return value ? *value : NULL;
}

static inline bool eg__idmap_contains(const eg__idmap *map, uint64_t key) {
    return eg__idmap_find(map, key) != NULL;
}

/* Inserts or overwrites; false when out of host memory. */
static inline bool eg__idmap_put(eg__idmap *map, uint64_t key, void *value) {
    if ((map->count + 1) * 2 > map->capacity) {
        size_t capacity = map->capacity ? map->capacity * 2 : 64;
        uint64_t *keys = calloc(capacity, sizeof *keys);
        void **values = calloc(capacity, sizeof *values);
        if (!keys || !values) {
            free(keys);
            free(values);
            return false;
        }
        for (size_t i = 0; i < map->capacity; i++) {
            if (!map->keys[i]) continue;
            size_t j = eg__idmap_slot(map->keys[i], capacity);
            while (keys[j]) j = (j + 1) & (capacity - 1);
            keys[j] = map->keys[i];
            values[j] = map->values[i];
        }
        free(map->keys);
        free(map->values);
        map->keys = keys;
        map->values = values;
        map->capacity = capacity;
    }
    size_t i = eg__idmap_slot(key, map->capacity);
    while (map->keys[i] && map->keys[i] != key) i = (i + 1) & (map->capacity - 1);
    if (!map->keys[i]) map->count++;
    map->keys[i] = key;
    map->values[i] = value;
    return true;
}

static inline void eg__idmap_clear(eg__idmap *map) {
    free(map->keys);
    free(map->values);
    map->keys = NULL;
    map->values = NULL;
    map->capacity = map->count = 0;
}

#endif
