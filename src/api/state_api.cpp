// Cache state: save, load, host swap.
#include "kvrt/kvrt.h"

#include "api/handles.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

Result check_cache(kvrt_cache_T* c) {
    KVRT_TRY(check_handle(c, Kind::Cache, "cache"));
    return check_context(c->owner, "the cache's context");
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_cache_state_save(kvrt_cache cache, int32_t seq, void* data, uint64_t* size) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->state_save(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_state_load(kvrt_cache cache, int32_t seq, const void* data, uint64_t size) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->state_load(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_state_save_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->state_save_file(seq, path);
    });
}

KVRT_API kvrt_result kvrt_cache_state_load_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->state_load_file(seq, path);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_out(kvrt_cache cache, int32_t seq, void* data, uint64_t* size) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->seq_swap_out(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_out_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->seq_swap_out_file(seq, path);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_in(kvrt_cache cache, int32_t seq, const void* data, uint64_t size) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->seq_swap_in(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_in_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_cache(cache));
        return cache->cache->seq_swap_in_file(seq, path);
    });
}

}  // extern "C"
