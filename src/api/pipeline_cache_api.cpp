// The context's pipeline cache (kvrt_context_get_pipeline_cache); the saved
// bytes come back in through kvrt_pipeline_cache_desc at context creation.
#include "kvrt/kvrt.h"

#include "api/handles.hpp"
#include "vk/pipeline.hpp"

using namespace kvrt;
using namespace kvrt::api;

extern "C" {

KVRT_API kvrt_result kvrt_context_get_pipeline_cache(kvrt_context context, void* data, uint64_t* size) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_handle(context, Kind::Context, "context"));
        if (!size) return fail(KVRT_ERROR_INVALID_ARGUMENT, "size is NULL");
        return context->ctx->pipelines().get_data(data, size);
    });
}

}  // extern "C"
