/* shard: every num_shards-th element of the input, from `index` on, as tf.data's
 * Dataset.shard — the data-parallel split of one pipeline between the ranks that run it. It runs
 * in the consumer's thread and skips by pulling and dropping elements (a stage cannot seek its
 * input), so the input's work for the skipped elements is still done: see the header for where to
 * put it. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdio.h>

#include "data/internal.h"

typedef struct shard_dataset {
    eg__unary_dataset base;
    int64_t num_shards;
    int64_t index;
} shard_dataset;

typedef struct shard_iter {
    eg__unary_iter base;
    bool started; /* the first kept element (input position `index`) was reached */
    bool done;    /* the input ended: later calls need not pull it again */
} shard_iter;

static eg_status shard_next(eg__iter *base, eg_element *out) {
    shard_iter *it = (shard_iter *)base;
    const shard_dataset *ds = (const shard_dataset *)base->dataset;
    if (it->done) return EG__END;
    /* Input positions index, index + num_shards, ...: before the first kept element `index` are
     * dropped, between two kept ones num_shards - 1. */
    int64_t drop = it->started ? ds->num_shards - 1 : ds->index;
    it->started = true;
    for (int64_t i = 0; i <= drop; i++) {
        eg_status status = eg__iter_next(it->base.input, out);
        if (status == EG__END) it->done = true;
        if (status != EG_OK) return status;
        if (i < drop) eg__element_clear(out);
    }
    return EG_OK;
}

static const eg__iter_ops shard_iter_ops = {shard_next, eg__unary_iter_free};

static eg_status shard_iterator_new(eg_dataset *ds, const eg__iter_params *params, uint64_t epoch,
                                    eg__iter **out) {
    return eg__unary_iter_new(ds, params, epoch, sizeof(shard_iter), &shard_iter_ops, out);
}

static const eg__dataset_ops shard_ops = {shard_iterator_new, eg__unary_destroy, false};

eg_dataset *eg_dataset_shard(eg_dataset *input, int64_t num_shards, int64_t index) {
    if (!input) return NULL;
    if (num_shards < 1)
        return eg__invalid_argument(input,
                                    "dataset_shard: num_shards is %lld (index %lld); it must be "
                                    "1 or more",
                                    (long long)num_shards, (long long)index);
    if (index < 0 || index >= num_shards)
        return eg__invalid_argument(input,
                                    "dataset_shard: index is %lld; it must be in [0, %lld) for "
                                    "num_shards %lld",
                                    (long long)index, (long long)num_shards, (long long)num_shards);
    if (num_shards == 1) return input; /* one shard is the whole input: no stage */
    char name[64];
    snprintf(name, sizeof name, "shard(%lld, %lld)", (long long)num_shards, (long long)index);
    shard_dataset *ds = eg__unary_new(input, sizeof *ds, &shard_ops, name);
    if (!ds) return NULL;
    ds->num_shards = num_shards;
    ds->index = index;
    return &ds->base.base;
}
