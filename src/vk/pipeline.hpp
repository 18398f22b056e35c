// Compute pipelines, created on first use from the embedded SPIR-V and kept
// for the life of the context, through a VkPipelineCache that can start from
// the bytes an earlier context saved (kvrt_pipeline_cache_desc).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "vk/dispatch.hpp"

namespace kvrt::vk {

class Context;

// What an op asks for: a shader, its storage-buffer bindings (0..n-1), the
// size of its push constants, and its specialization constants. Constant id 0
// is always the workgroup size (local_size_x_id = 0).
// The specialization constant every pipeline gets from its context:
// whether f16 conversions take the kernels' integer path (Context::soft_f16).
constexpr uint32_t kSoftF16ConstantId = 31;

struct PipelineKey {
    std::string shader;
    uint32_t n_bindings = 0;
    uint32_t push_bytes = 0;
    std::vector<uint32_t> spec;  // values of constant ids 0, 1, 2, ...
    // Kernels built on subgroup operations: the subgroup size the pipeline
    // requires (0: none; needs subgroup size control for compute) and whether
    // it requires full subgroups (needs computeFullSubgroups).
    uint32_t required_subgroup = 0;
    bool full_subgroups = false;
    // Bytes of workgroup-shared memory the kernel declares with these
    // constants (checked against maxComputeSharedMemorySize; it follows from
    // the shader and spec, so it is not part of the key's order).
    uint32_t shared_bytes = 0;

    bool operator<(const PipelineKey& o) const;
};

struct Pipeline {
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
    uint32_t n_bindings = 0;
    uint32_t push_bytes = 0;
    uint32_t local_size_x = 0;
    const char* label = "";  // static name of the shader, for timings
};

class PipelineCache {
public:
    explicit PipelineCache(Context& ctx) : ctx_(ctx) {}
    PipelineCache(const PipelineCache&) = delete;
    PipelineCache& operator=(const PipelineCache&) = delete;
    ~PipelineCache();

    // Creates the VkPipelineCache, from `size` bytes of saved data when they
    // were made by this device and driver (checked against the cache header:
    // vendor, device and pipelineCacheUUID). Other data is ignored with an
    // INFO message, never an error; the bytes are copied.
    Result init(const void* data, uint64_t size);

    // vkGetPipelineCacheData: with `data` NULL writes the size to *size;
    // otherwise writes up to *size bytes (a valid, possibly partial cache) and
    // the count written, and fails with KVRT_ERROR_INVALID_ARGUMENT when not
    // everything fit.
    Result get_data(void* data, uint64_t* size);

    // The pipeline for `key`, created on first use. The pointer stays valid
    // for the life of the context. Any thread: the map is locked only to
    // look up and insert, never while a pipeline compiles (two threads that
    // want the same new pipeline may both compile it; one copy is kept).
    Result get(const PipelineKey& key, const Pipeline** out);

    size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return pipelines_.size();
    }

    // The keys of the pipelines created so far (which kernels ran, for tests).
    std::vector<PipelineKey> keys() const {
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<PipelineKey> out;
        out.reserve(pipelines_.size());
        for (const auto& kv : pipelines_) out.push_back(kv.first);
        return out;
    }

private:
    Result create(const PipelineKey& key, Pipeline* out);
    void destroy(const Pipeline& p);

    Context& ctx_;
    // Internally synchronized by Vulkan (created without
    // VK_PIPELINE_CACHE_CREATE_EXTERNALLY_SYNCHRONIZED_BIT), so pipelines
    // compile through it on several threads at once.
    VkPipelineCache cache_ = VK_NULL_HANDLE;
    mutable std::mutex mutex_;  // guards pipelines_; a leaf lock
    std::map<PipelineKey, Pipeline> pipelines_;  // node-based: pointers stay valid
};

}  // namespace kvrt::vk
