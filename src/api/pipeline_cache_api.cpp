// The context's pipeline cache (kvrt_context_get_pipeline_cache; the saved
// bytes come back in through kvrt_pipeline_cache_desc at context creation)
// and the kernel choices behind its pipelines (kvrt_context_get_tuning).
#include "kvrt/kvrt.h"

#include <cstring>

#include "api/handles.hpp"
#include "ops/tuning.hpp"
#include "vk/pipeline.hpp"

using namespace kvrt;
using namespace kvrt::api;

extern "C" {

KVRT_API kvrt_result kvrt_context_get_pipeline_cache(kvrt_context context, void* data, uint64_t* size) {
    return guarded([&]() -> Result {
        ContextObj* c = nullptr;
        KVRT_TRY(resolve(context, &c, "context"));
        if (!size) return fail(KVRT_ERROR_INVALID_ARGUMENT, "size is NULL");
        return c->ctx->pipelines().get_data(data, size);
    });
}

KVRT_API kvrt_result kvrt_context_get_tuning(kvrt_context context, char* text, uint64_t* size) {
    return guarded([&]() -> Result {
        ContextObj* c = nullptr;
        KVRT_TRY(resolve(context, &c, "context"));
        if (!size) return fail(KVRT_ERROR_INVALID_ARGUMENT, "size is NULL");
        const vk::Context& ctx = *c->ctx;
        const std::string s = ops::Tuning::of(ctx).describe(ctx);
        const uint64_t need = s.size() + 1;
        const uint64_t room = *size;
        *size = need;
        if (!text) return KVRT_SUCCESS;
        if (room < need)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "buffer too small: the text needs %llu bytes, *size was %llu",
                        static_cast<unsigned long long>(need), static_cast<unsigned long long>(room));
        std::memcpy(text, s.c_str(), need);
        return KVRT_SUCCESS;
    });
}

}  // extern "C"
