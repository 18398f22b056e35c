#include "vk/pipeline.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "core/fault.hpp"
#include "pipelines/registry.hpp"
#include "vk/context.hpp"

namespace kvrt::vk {

bool PipelineKey::operator<(const PipelineKey& o) const {
    return std::tie(shader, n_bindings, push_bytes, spec, required_subgroup, full_subgroups) <
           std::tie(o.shader, o.n_bindings, o.push_bytes, o.spec, o.required_subgroup, o.full_subgroups);
}

namespace {

// VkPipelineCacheHeaderVersionOne: 32 bytes, every field least significant
// byte first whatever the host's byte order.
constexpr size_t kHeaderBytes = 32;

uint32_t read_le32(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Why saved data does not fit this device, or nullptr when it does. `why`
// receives the details.
const char* mismatch(const uint8_t* data, uint64_t size, const VkPhysicalDeviceProperties& props, char* why,
                     size_t why_size) {
    if (size < kHeaderBytes) {
        std::snprintf(why, why_size, "%llu bytes are shorter than the 32-byte header",
                      static_cast<unsigned long long>(size));
        return why;
    }
    const uint32_t header_size = read_le32(data);
    const uint32_t version = read_le32(data + 4);
    const uint32_t vendor = read_le32(data + 8);
    const uint32_t device = read_le32(data + 12);
    if (header_size < kHeaderBytes || header_size > size || version != VK_PIPELINE_CACHE_HEADER_VERSION_ONE) {
        std::snprintf(why, why_size, "not a Vulkan pipeline cache (header size %u, version %u)", header_size,
                      version);
        return why;
    }
    if (vendor != props.vendorID || device != props.deviceID) {
        std::snprintf(why, why_size, "made by device %04x:%04x, this is %04x:%04x", vendor, device,
                      props.vendorID, props.deviceID);
        return why;
    }
    if (std::memcmp(data + 16, props.pipelineCacheUUID, VK_UUID_SIZE) != 0) {
        std::snprintf(why, why_size, "made by another driver or driver version (pipelineCacheUUID differs)");
        return why;
    }
    return nullptr;
}

}  // namespace

Result PipelineCache::init(const void* data, uint64_t size) {
    VkPipelineCacheCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
    if (data && size > 0) {
        char why[160];
        if (mismatch(static_cast<const uint8_t*>(data), size, ctx_.info().props, why, sizeof why)) {
            ctx_.log().log(KVRT_LOG_LEVEL_INFO, "saved pipeline cache ignored: %s", why);
        } else if (size > SIZE_MAX) {
            ctx_.log().log(KVRT_LOG_LEVEL_INFO, "saved pipeline cache ignored: too large");
        } else {
            ci.initialDataSize = static_cast<size_t>(size);
            ci.pInitialData = data;
        }
    }
    const DeviceFns& fn = ctx_.fn();
    VkResult r = fn.vkCreatePipelineCache(ctx_.device(), &ci, nullptr, &cache_);
    if (r != VK_SUCCESS && ci.initialDataSize > 0 && r != VK_ERROR_DEVICE_LOST) {
        // A driver may still refuse data whose header matched (a corrupt body):
        // start empty, as with any other unusable data.
        ctx_.log().log(KVRT_LOG_LEVEL_INFO, "saved pipeline cache ignored: the driver refused it (%s)",
                       vk_result_name(r));
        ci.initialDataSize = 0;
        ci.pInitialData = nullptr;
        r = fn.vkCreatePipelineCache(ctx_.device(), &ci, nullptr, &cache_);
    } else if (r == VK_SUCCESS && ci.initialDataSize > 0) {
        ctx_.log().log(KVRT_LOG_LEVEL_INFO, "pipeline cache started from %llu saved bytes",
                       static_cast<unsigned long long>(ci.initialDataSize));
    }
    return ctx_.check(r, "vkCreatePipelineCache");
}

Result PipelineCache::get_data(void* data, uint64_t* size) {
    const DeviceFns& fn = ctx_.fn();
    if (!data) {
        size_t n = 0;
        KVRT_TRY(ctx_.check(fn.vkGetPipelineCacheData(ctx_.device(), cache_, &n, nullptr), "vkGetPipelineCacheData"));
        *size = n;
        return KVRT_SUCCESS;
    }
    const uint64_t room = *size;
    size_t n = static_cast<size_t>(std::min<uint64_t>(room, SIZE_MAX));
    const VkResult r = fn.vkGetPipelineCacheData(ctx_.device(), cache_, &n, data);
    if (r == VK_INCOMPLETE) {
        *size = n;
        size_t need = 0;
        if (fn.vkGetPipelineCacheData(ctx_.device(), cache_, &need, nullptr) != VK_SUCCESS) need = 0;
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "buffer too small: the pipeline cache has %llu bytes, room for %llu",
                    static_cast<unsigned long long>(need), static_cast<unsigned long long>(room));
    }
    KVRT_TRY(ctx_.check(r, "vkGetPipelineCacheData"));
    *size = n;
    return KVRT_SUCCESS;
}

void PipelineCache::destroy(const Pipeline& p) {
    const DeviceFns& fn = ctx_.fn();
    VkDevice dev = ctx_.device();
    fn.vkDestroyPipeline(dev, p.pipeline, nullptr);
    fn.vkDestroyPipelineLayout(dev, p.layout, nullptr);
    fn.vkDestroyDescriptorSetLayout(dev, p.set_layout, nullptr);
}

PipelineCache::~PipelineCache() {
    for (auto& [key, p] : pipelines_) destroy(p);
    if (cache_) ctx_.fn().vkDestroyPipelineCache(ctx_.device(), cache_, nullptr);
}

Result PipelineCache::get(const PipelineKey& key, const Pipeline** out) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (auto it = pipelines_.find(key); it != pipelines_.end()) {
            *out = &it->second;
            return KVRT_SUCCESS;
        }
    }
    Pipeline p;
    KVRT_TRY(create(key, &p));
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, inserted] = pipelines_.emplace(key, p);
    if (!inserted) destroy(p);  // another thread made it meanwhile
    *out = &it->second;
    return KVRT_SUCCESS;
}

Result PipelineCache::create(const PipelineKey& key, Pipeline* out) {
    KVRT_FAULT_POINT("pipeline creation", KVRT_ERROR_OUT_OF_DEVICE_MEMORY);
    const spirv::ShaderBlob* blob = spirv::find_shader(key.shader.c_str());
    if (!blob) return fail(KVRT_ERROR_INTERNAL, "no embedded shader '%s'", key.shader.c_str());
    if (key.spec.empty() || key.spec[0] == 0)
        return fail(KVRT_ERROR_INTERNAL, "pipeline '%s' needs a workgroup size", key.shader.c_str());
    const auto& limits = ctx_.info().props.limits;
    if (key.spec[0] > limits.maxComputeWorkGroupInvocations || key.spec[0] > limits.maxComputeWorkGroupSize[0])
        return fail(KVRT_ERROR_UNSUPPORTED, "workgroup size %u of '%s' exceeds the device limit",
                    key.spec[0], key.shader.c_str());
    const FeatureSet& enabled = ctx_.enabled();
    if ((key.required_subgroup && (!enabled.subgroup_size_control || !ctx_.info().compute_subgroup_size_required)) ||
        (key.full_subgroups && !enabled.compute_full_subgroups))
        return fail(KVRT_ERROR_INTERNAL, "'%s' needs subgroup size control the device does not offer",
                    key.shader.c_str());
    if (key.n_bindings > limits.maxPerStageDescriptorStorageBuffers ||
        key.n_bindings > limits.maxDescriptorSetStorageBuffers)
        return fail(KVRT_ERROR_UNSUPPORTED, "'%s' binds %u storage buffers, the device allows %u per stage and %u per set",
                    key.shader.c_str(), key.n_bindings, limits.maxPerStageDescriptorStorageBuffers,
                    limits.maxDescriptorSetStorageBuffers);
    if (key.shared_bytes > limits.maxComputeSharedMemorySize)
        return fail(KVRT_ERROR_UNSUPPORTED, "'%s' needs %u bytes of shared memory, the device has %u",
                    key.shader.c_str(), key.shared_bytes, limits.maxComputeSharedMemorySize);
    if (key.push_bytes > limits.maxPushConstantsSize)
        return fail(KVRT_ERROR_UNSUPPORTED, "'%s' needs %u bytes of push constants, the device has %u",
                    key.shader.c_str(), key.push_bytes, limits.maxPushConstantsSize);

    const DeviceFns& fn = ctx_.fn();
    VkDevice dev = ctx_.device();
    Pipeline p;
    p.n_bindings = key.n_bindings;
    p.push_bytes = key.push_bytes;
    p.local_size_x = key.spec[0];
    p.label = blob->name;

    std::vector<VkDescriptorSetLayoutBinding> bindings(key.n_bindings);
    for (uint32_t i = 0; i < key.n_bindings; ++i) {
        bindings[i].binding = i;
        bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        bindings[i].descriptorCount = 1;
        bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo dci{};
    dci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    dci.bindingCount = key.n_bindings;
    dci.pBindings = bindings.data();

    VkPushConstantRange range{};
    range.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    range.size = key.push_bytes;

    VkShaderModuleCreateInfo smci{};
    smci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    smci.codeSize = blob->count * sizeof(uint32_t);
    smci.pCode = blob->words;
    VkShaderModule module = VK_NULL_HANDLE;

    // The op's constants (ids 0, 1, ...), then the context's own: id 31,
    // KVRT_SOFT_F16 of shaders/include/common.glsl (a shader without it
    // ignores the entry).
    std::vector<uint32_t> values = key.spec;
    values.push_back(ctx_.soft_f16() ? 1u : 0u);
    std::vector<VkSpecializationMapEntry> entries(values.size());
    for (uint32_t i = 0; i < values.size(); ++i) {
        entries[i].constantID = i + 1 == values.size() ? kSoftF16ConstantId : i;
        entries[i].offset = i * sizeof(uint32_t);
        entries[i].size = sizeof(uint32_t);
    }
    VkSpecializationInfo spec{};
    spec.mapEntryCount = static_cast<uint32_t>(entries.size());
    spec.pMapEntries = entries.data();
    spec.dataSize = values.size() * sizeof(uint32_t);
    spec.pData = values.data();

    Result r = ctx_.check(fn.vkCreateDescriptorSetLayout(dev, &dci, nullptr, &p.set_layout),
                          "vkCreateDescriptorSetLayout");
    if (r == KVRT_SUCCESS) {
        VkPipelineLayoutCreateInfo lci{};
        lci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
        lci.setLayoutCount = 1;
        lci.pSetLayouts = &p.set_layout;
        lci.pushConstantRangeCount = key.push_bytes ? 1 : 0;
        lci.pPushConstantRanges = &range;
        r = ctx_.check(fn.vkCreatePipelineLayout(dev, &lci, nullptr, &p.layout), "vkCreatePipelineLayout");
    }
    if (r == KVRT_SUCCESS)
        r = ctx_.check(fn.vkCreateShaderModule(dev, &smci, nullptr, &module), "vkCreateShaderModule");
    if (r == KVRT_SUCCESS) {
        VkComputePipelineCreateInfo pci{};
        pci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
        pci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
        pci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        pci.stage.module = module;
        pci.stage.pName = "main";
        pci.stage.pSpecializationInfo = &spec;
        VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT subgroup{};
        subgroup.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT;
        subgroup.requiredSubgroupSize = key.required_subgroup;
        if (key.required_subgroup) pci.stage.pNext = &subgroup;
        if (key.full_subgroups) pci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT;
        pci.layout = p.layout;
        r = ctx_.check(fn.vkCreateComputePipelines(dev, cache_, 1, &pci, nullptr, &p.pipeline),
                       "vkCreateComputePipelines");
    }
    if (module) fn.vkDestroyShaderModule(dev, module, nullptr);
    if (r != KVRT_SUCCESS) {
        if (p.layout) fn.vkDestroyPipelineLayout(dev, p.layout, nullptr);
        if (p.set_layout) fn.vkDestroyDescriptorSetLayout(dev, p.set_layout, nullptr);
        return r;
    }
    ctx_.set_name(VK_OBJECT_TYPE_PIPELINE, object_bits(p.pipeline), blob->name);
    *out = p;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::vk
