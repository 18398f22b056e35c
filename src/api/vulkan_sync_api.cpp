// Ordering with the application's own GPU work (kvrt_vulkan.h): submissions
// that wait on and signal the application's semaphores, and recording into
// the application's command buffers.
#include "kvrt/kvrt.h"
#include "kvrt/kvrt_vulkan.h"

#include <vector>

#include "api/handles.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

// Copies `count` semaphores (and their values, when given) of a submit desc
// into `sems`/`values`, refusing NULL arrays and null handles.
Result read_semaphores(const char* what, uint32_t count, const VkSemaphore* semaphores, const uint64_t* values,
                       std::vector<VkSemaphore>* sems, std::vector<uint64_t>* out_values) {
    if (count == 0) return KVRT_SUCCESS;
    if (!semaphores)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc: %s_semaphores is NULL with %s_count %u", what, what, count);
    sems->assign(semaphores, semaphores + count);
    for (uint32_t i = 0; i < count; ++i)
        if (!semaphores[i])
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc: %s_semaphores[%u] is VK_NULL_HANDLE", what, i);
    if (values) out_values->assign(values, values + count);
    return KVRT_SUCCESS;
}

// Stages a semaphore wait may name for kvrt's work: not 0 and not the host
// stage (which a queue wait cannot block).
Result check_wait_stages(uint32_t count, const VkPipelineStageFlags* stages) {
    if (!stages) return KVRT_SUCCESS;
    for (uint32_t i = 0; i < count; ++i) {
        if (stages[i] == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc: wait_stages[%u] is 0", i);
        if (stages[i] & VK_PIPELINE_STAGE_HOST_BIT)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc: wait_stages[%u] includes VK_PIPELINE_STAGE_HOST_BIT", i);
    }
    return KVRT_SUCCESS;
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_stream_submit_vulkan(kvrt_stream stream, const kvrt_vulkan_submit_desc* desc) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        KVRT_TRY(resolve_usable(stream, &s, "stream"));
        KVRT_TRY(check_optional_struct("desc", desc, KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC));
        if (!desc) return s->stream->submit();
        vk::SubmitSync sync;
        KVRT_TRY(read_semaphores("wait", desc->wait_count, desc->wait_semaphores, desc->wait_values, &sync.waits,
                                 &sync.wait_values));
        KVRT_TRY(read_semaphores("signal", desc->signal_count, desc->signal_semaphores, desc->signal_values,
                                 &sync.signals, &sync.signal_values));
        KVRT_TRY(check_wait_stages(desc->wait_count, desc->wait_stages));
        if (desc->wait_stages)
            sync.wait_stages.assign(desc->wait_stages, desc->wait_stages + desc->wait_count);
        else
            sync.wait_stages.assign(desc->wait_count,
                                    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT);
        return s->stream->submit(&sync);
    });
}

KVRT_API kvrt_result kvrt_stream_begin_vulkan(kvrt_stream stream, VkCommandBuffer command_buffer) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        KVRT_TRY(resolve_usable(stream, &s, "stream"));
        if (!command_buffer) return fail(KVRT_ERROR_INVALID_ARGUMENT, "command_buffer is VK_NULL_HANDLE");
        return s->stream->begin_external(command_buffer);
    });
}

KVRT_API kvrt_result kvrt_stream_end_vulkan(kvrt_stream stream, const kvrt_vulkan_completion* completion) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        KVRT_TRY(resolve(stream, &s, "stream"));
        if (!completion) return s->stream->end_external(nullptr);
        KVRT_TRY(check_struct("completion", completion, KVRT_STRUCT_TYPE_VULKAN_COMPLETION));
        const bool sem = completion->semaphore != VK_NULL_HANDLE;
        const bool fence = completion->fence != VK_NULL_HANDLE;
        if (sem == fence)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "completion: set exactly one of semaphore and fence (%s)",
                        sem ? "both are set" : "neither is set");
        if (sem && completion->value == 0)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "completion: value 0 for a timeline semaphore (the value the submission signals, > 0)");
        vk::ExternalCompletion c;
        c.semaphore = completion->semaphore;
        c.value = completion->value;
        c.fence = completion->fence;
        return s->stream->end_external(&c);
    });
}

}  // extern "C"
