// The KV cache's stored bytes (kvrt_cache_read_raw).
#include "kvrt/kvrt.h"

#include "api/handles.hpp"
#include "core/raw_enum.hpp"

using namespace kvrt;
using namespace kvrt::api;

extern "C" {

KVRT_API kvrt_result kvrt_cache_read_raw(kvrt_cache cache, int32_t layer, kvrt_kv_array array, uint32_t n_cells,
                                         const uint32_t* cells, void* out, uint64_t out_bytes) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        // Any int may arrive as `array`: compared as an integer.
        const int32_t a = raw_enum(array);
        if (a != KVRT_KV_ARRAY_K && a != KVRT_KV_ARRAY_V)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "array %d is not KVRT_KV_ARRAY_K or KVRT_KV_ARRAY_V",
                        static_cast<int>(a));
        return c->cache->read_raw(layer, a == KVRT_KV_ARRAY_K ? cache::Array::K : cache::Array::V, n_cells, cells, out,
                                  out_bytes);
    });
}

}  // extern "C"
