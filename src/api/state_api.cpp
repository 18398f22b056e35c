// Cache state: save, load, host swap.
#include "kvrt/kvrt.h"

#include "api/handles.hpp"

using namespace kvrt;
using namespace kvrt::api;

extern "C" {

KVRT_API kvrt_result kvrt_cache_state_save(kvrt_cache cache, int32_t seq, void* data, uint64_t* size) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->state_save(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_state_load(kvrt_cache cache, int32_t seq, const void* data, uint64_t size) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->state_load(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_state_save_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->state_save_file(seq, path);
    });
}

KVRT_API kvrt_result kvrt_cache_state_load_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->state_load_file(seq, path);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_out(kvrt_cache cache, int32_t seq, void* data, uint64_t* size) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->seq_swap_out(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_out_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->seq_swap_out_file(seq, path);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_in(kvrt_cache cache, int32_t seq, const void* data, uint64_t size) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->seq_swap_in(seq, data, size);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_swap_in_file(kvrt_cache cache, int32_t seq, const char* path) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->seq_swap_in_file(seq, path);
    });
}

}  // extern "C"
