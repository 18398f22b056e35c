/* context_shift.c: generating past the cache's capacity with context shifts.
 *
 * A cache of 16 cells takes one token per step. When a store fails with
 * KVRT_ERROR_CACHE_FULL, kvrt_cache_context_shift keeps the first 4 tokens
 * (attention sinks), drops half of the others (the oldest half) and moves the
 * rest down to close the gap: their positions drop, and kvrt rotates their
 * keys (RoPE) to match before the next attention. Generation then goes on at
 * the new end.
 *
 * The check: token t's V row holds the number t, and the query is zero, so
 * every visible token gets the same weight and attention returns the mean of
 * the token numbers the cache still holds. This program keeps its own list of
 * those tokens and compares at every step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvrt/kvrt.h>

#define HEAD_DIM 8
#define CAPACITY 16
#define N_KEEP 4      /* attention sinks, never discarded */
#define N_STEPS 40    /* tokens generated: the cache fills several times */

static void check(kvrt_result r, const char* what) {
    if (r != KVRT_SUCCESS) {
        fprintf(stderr, "%s failed: %s: %s\n", what, kvrt_result_string(r), kvrt_last_error_message());
        exit(1);
    }
}

static void log_message(void* user_data, kvrt_log_level level, const char* message) {
    (void)user_data;
    fprintf(stderr, "kvrt: %s: %s\n", level >= KVRT_LOG_LEVEL_ERROR ? "error" : "warning", message);
}

/* Stores token `token` of sequence 0 at position `pos`. */
static kvrt_result store_token(kvrt_cache cache, int token, int32_t pos) {
    float k[HEAD_DIM], v[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) {
        k[d] = (float)((token * 5 + d) % 9 - 4) / 4.0f; /* any key will do */
        v[d] = (float)token;
    }
    int32_t seq = 0;
    kvrt_batch batch = KVRT_BATCH_INIT;
    batch.n_tokens = 1;
    batch.positions = &pos;
    batch.seq_ids = &seq;
    kvrt_tensor_ref k_ref = KVRT_TENSOR_REF_INIT, v_ref = KVRT_TENSOR_REF_INIT;
    k_ref.host = k;
    v_ref.host = v;
    return kvrt_cache_store(cache, NULL, &batch, 0, &k_ref, &v_ref, NULL);
}

int main(void) {
    kvrt_context_desc context_desc = KVRT_CONTEXT_DESC_INIT;
    context_desc.log_callback = log_message;
    kvrt_context ctx;
    check(kvrt_context_create(&context_desc, &ctx), "kvrt_context_create");

    /* Options beyond a struct's fields come as structs chained on `next`:
     * here the model's RoPE, which kvrt needs to rotate keys when positions
     * move. The library refuses a chained struct it does not know. */
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    rope.mode = KVRT_ROPE_MODE_NEOX;
    rope.freq_base = 10000.0f;

    kvrt_cache_desc cache_desc = KVRT_CACHE_DESC_INIT;
    cache_desc.next = &rope;
    cache_desc.n_layers = 1;
    cache_desc.n_heads = 1;
    cache_desc.n_kv_heads = 1;
    cache_desc.head_dim_k = HEAD_DIM;
    cache_desc.capacity = CAPACITY;
    cache_desc.max_seqs = 1;
    kvrt_cache cache;
    check(kvrt_cache_create(ctx, &cache_desc, &cache), "kvrt_cache_create");

    int held[CAPACITY]; /* the tokens in the cache, in position order */
    int n_held = 0;
    int32_t n_past = 0; /* the next position */
    int failures = 0;

    for (int token = 0; token < N_STEPS; ++token) {
        kvrt_result r = store_token(cache, token, n_past);
        if (r == KVRT_ERROR_CACHE_FULL) {
            /* Full (nothing was stored): shift, then store again. n_discard 0
             * means half of the tokens after the sinks. */
            int32_t new_n_past;
            check(kvrt_cache_context_shift(cache, 0, N_KEEP, 0, &new_n_past), "kvrt_cache_context_shift");
            int discarded = (n_held - N_KEEP) / 2;
            printf("step %2d: cache full at position %d: kept %d sinks, dropped tokens %d..%d, next position %d\n",
                   token, n_past, N_KEEP, held[N_KEEP], held[N_KEEP + discarded - 1], new_n_past);
            for (int i = N_KEEP; i + discarded < n_held; ++i) held[i] = held[i + discarded];
            n_held -= discarded;
            n_past = new_n_past;
            if (n_past != n_held) {
                fprintf(stderr, "expected next position %d after the shift, got %d\n", n_held, n_past);
                return 1;
            }
            r = store_token(cache, token, n_past);
        }
        check(r, "kvrt_cache_store");
        held[n_held++] = token;

        /* Attention of this step's query (zero: equal weights) at its
         * position. */
        float q[HEAD_DIM] = {0}, out[HEAD_DIM];
        int32_t seq = 0;
        kvrt_batch query = KVRT_BATCH_INIT;
        query.n_tokens = 1;
        query.positions = &n_past;
        query.seq_ids = &seq;
        kvrt_tensor_ref q_ref = KVRT_TENSOR_REF_INIT;
        q_ref.host = q;
        kvrt_output_ref out_ref = KVRT_OUTPUT_REF_INIT;
        out_ref.host = out;
        check(kvrt_cache_attention(cache, NULL, 0, &query, &q_ref, &out_ref, NULL), "kvrt_cache_attention");

        double mean = 0.0;
        for (int i = 0; i < n_held; ++i) mean += held[i];
        mean /= n_held;
        if (fabs(out[0] - mean) > 1e-3) {
            fprintf(stderr, "step %d: attention gives %.4f, the mean of the tokens held is %.4f\n", token,
                    out[0], mean);
            ++failures;
        }
        ++n_past;
    }

    /* The cache's own view: how many cells are used, and the last position. */
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    check(kvrt_cache_get_info(cache, &info), "kvrt_cache_get_info");
    int32_t pos_max;
    check(kvrt_cache_seq_pos_max(cache, 0, &pos_max), "kvrt_cache_seq_pos_max");
    printf("after %d tokens: %u of %u cells used, last position %d, tokens held:", N_STEPS, info.used,
           info.capacity, pos_max);
    for (int i = 0; i < n_held; ++i) printf(" %d", held[i]);
    printf("\n");
    if (info.used != (uint32_t)n_held || pos_max != n_past - 1) {
        fprintf(stderr, "expected %d cells used and last position %d\n", n_held, n_past - 1);
        ++failures;
    }

    kvrt_cache_destroy(cache);
    kvrt_context_destroy(ctx);
    return failures ? 1 : 0;
}
