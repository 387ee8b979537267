/* The types the host's C loops share with llama.cpp (llama.h's layouts) and with each other.
   fast_rows.c: a logits row's top-k sampling; lone_run.c: a lone stream's decode loop. */

#ifndef INFERTUI_HOT_LOOPS_H
#define INFERTUI_HOT_LOOPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t id;
    float logit;
    float p;
} token_data; /* llama_token_data */

typedef struct {
    token_data *data;
    size_t size;
    int64_t selected;
    _Bool sorted;
} token_data_array; /* llama_token_data_array */

typedef struct {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_batch; /* llama_batch */

typedef void (*apply_fn)(void *chain, token_data_array *candidates);
typedef void (*accept_fn)(void *chain, int32_t token);

int32_t infertui_sample_row(const float *row, int32_t n_vocab, int32_t top_k, void *chain,
                            apply_fn apply, accept_fn accept, token_data *out, int32_t cap);

#endif
