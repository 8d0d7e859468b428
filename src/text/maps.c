/* The tokenizers' hash maps (internal.h): open addressing with linear probing, kept at most half
 * full. Byte-string keys live in one arena so that a vocabulary of 50,000 tokens is a handful of
 * allocations, not 50,000. */
#include <stdlib.h>
#include <string.h>

#include "text/internal.h"

/* FNV-1a: keys are short (words and tokens), where it is as good as anything and needs no
 * alignment. */
static uint32_t hash_bytes(const void *key, size_t length) {
    const uint8_t *p = key;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < length; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

int64_t eg__bytes_map_find(const eg__bytes_map *map, const void *key, size_t length) {
    if (!map->n_slots) return -1;
    uint32_t h = hash_bytes(key, length);
    for (size_t i = h & (map->n_slots - 1);; i = (i + 1) & (map->n_slots - 1)) {
        uint32_t slot = map->slots[i];
        if (!slot) return -1;
        const eg__bytes_entry *e = &map->entries[slot - 1];
        if (e->hash == h && e->length == length && memcmp(map->arena + e->offset, key, length) == 0)
            return (int64_t)slot - 1;
    }
}

static bool grow_slots(eg__bytes_map *map) {
    size_t n = map->n_slots ? map->n_slots * 2 : 64;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (!slots) return false;
    for (size_t k = 0; k < map->n_entries; k++) {
        size_t i = map->entries[k].hash & (n - 1);
        while (slots[i]) i = (i + 1) & (n - 1);
        slots[i] = (uint32_t)(k + 1);
    }
    free(map->slots);
    map->slots = slots;
    map->n_slots = n;
    return true;
}

bool eg__bytes_map_add(eg__bytes_map *map, const void *key, size_t length, int64_t value,
                       size_t *index) {
    if (length >= UINT32_MAX || map->n_entries >= UINT32_MAX - 1) return false;
    if (map->arena_used + length + 1 > map->arena_capacity) {
        size_t capacity = map->arena_capacity ? map->arena_capacity : 4096;
        while (capacity < map->arena_used + length + 1) capacity *= 2;
        char *arena = realloc(map->arena, capacity);
        if (!arena) return false;
        map->arena = arena;
        map->arena_capacity = capacity;
    }
    if (map->n_entries == map->entries_capacity) {
        size_t capacity = map->entries_capacity ? map->entries_capacity * 2 : 64;
        eg__bytes_entry *entries = realloc(map->entries, capacity * sizeof *entries);
        if (!entries) return false;
        map->entries = entries;
        map->entries_capacity = capacity;
    }
    if ((map->n_entries + 1) * 2 > map->n_slots && !grow_slots(map)) return false;
    eg__bytes_entry *e = &map->entries[map->n_entries];
    e->offset = map->arena_used;
    e->length = (uint32_t)length;
    e->hash = hash_bytes(key, length);
    e->value = value;
    if (length) memcpy(map->arena + map->arena_used, key, length);
    map->arena[map->arena_used + length] = '\0';
    map->arena_used += length + 1;
    size_t i = e->hash & (map->n_slots - 1);
    while (map->slots[i]) i = (i + 1) & (map->n_slots - 1);
    map->slots[i] = (uint32_t)(map->n_entries + 1);
    if (index) *index = map->n_entries;
    map->n_entries++;
    return true;
}

void eg__bytes_map_clear(eg__bytes_map *map) {
    map->arena_used = 0;
    map->n_entries = 0;
    if (map->slots) memset(map->slots, 0, map->n_slots * sizeof *map->slots);
}

void eg__bytes_map_free(eg__bytes_map *map) {
    free(map->arena);
    free(map->entries);
    free(map->slots);
    memset(map, 0, sizeof *map);
}

static size_t pair_slot(uint64_t key, size_t capacity) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (capacity - 1);
}

int64_t *eg__pair_map_find(const eg__pair_map *map, uint64_t key) {
    if (!map->capacity) return NULL;
    for (size_t i = pair_slot(key, map->capacity);; i = (i + 1) & (map->capacity - 1)) {
        if (map->keys[i] == key) return &map->values[i];
        if (map->keys[i] == EG__PAIR_EMPTY) return NULL;
    }
}

int64_t *eg__pair_map_upsert(eg__pair_map *map, uint64_t key, int64_t initial) {
    int64_t *found = eg__pair_map_find(map, key);
    if (found) return found;
    if ((map->count + 1) * 2 > map->capacity) {
        size_t capacity = map->capacity ? map->capacity * 2 : 64;
        uint64_t *keys = malloc(capacity * sizeof *keys);
        int64_t *values = malloc(capacity * sizeof *values);
        if (!keys || !values) {
            free(keys);
            free(values);
            return NULL;
        }
        memset(keys, 0xFF, capacity * sizeof *keys);
        for (size_t i = 0; i < map->capacity; i++) {
            if (map->keys[i] == EG__PAIR_EMPTY) continue;
            size_t j = pair_slot(map->keys[i], capacity);
            while (keys[j] != EG__PAIR_EMPTY) j = (j + 1) & (capacity - 1);
            keys[j] = map->keys[i];
            values[j] = map->values[i];
        }
        free(map->keys);
        free(map->values);
        map->keys = keys;
        map->values = values;
        map->capacity = capacity;
    }
    size_t i = pair_slot(key, map->capacity);
    while (map->keys[i] != EG__PAIR_EMPTY) i = (i + 1) & (map->capacity - 1);
    map->keys[i] = key;
    map->values[i] = initial;
    map->count++;
    return &map->values[i];
}

void eg__pair_map_free(eg__pair_map *map) {
    free(map->keys);
    free(map->values);
    memset(map, 0, sizeof *map);
}
