#include "vk/pipeline.hpp"

#include <tuple>

#include "core/fault.hpp"
#include "pipelines/registry.hpp"
#include "vk/context.hpp"

namespace kvrt::vk {

bool PipelineKey::operator<(const PipelineKey& o) const {
    return std::tie(shader, n_bindings, push_bytes, spec) <
           std::tie(o.shader, o.n_bindings, o.push_bytes, o.spec);
}

Result PipelineCache::init() {
    VkPipelineCacheCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
    return ctx_.check(ctx_.fn().vkCreatePipelineCache(ctx_.device(), &ci, nullptr, &cache_),
                      "vkCreatePipelineCache");
}

PipelineCache::~PipelineCache() {
    const DeviceFns& fn = ctx_.fn();
    VkDevice dev = ctx_.device();
    for (auto& [key, p] : pipelines_) {
        fn.vkDestroyPipeline(dev, p.pipeline, nullptr);
        fn.vkDestroyPipelineLayout(dev, p.layout, nullptr);
        fn.vkDestroyDescriptorSetLayout(dev, p.set_layout, nullptr);
    }
    if (cache_) fn.vkDestroyPipelineCache(dev, cache_, nullptr);
}

Result PipelineCache::get(const PipelineKey& key, const Pipeline** out) {
    if (auto it = pipelines_.find(key); it != pipelines_.end()) {
        *out = &it->second;
        return KVRT_SUCCESS;
    }
    KVRT_FAULT_POINT("pipeline creation", KVRT_ERROR_OUT_OF_DEVICE_MEMORY);
    const spirv::ShaderBlob* blob = spirv::find_shader(key.shader.c_str());
    if (!blob) return fail(KVRT_ERROR_INTERNAL, "no embedded shader '%s'", key.shader.c_str());
    if (key.spec.empty() || key.spec[0] == 0)
        return fail(KVRT_ERROR_INTERNAL, "pipeline '%s' needs a workgroup size", key.shader.c_str());
    const auto& limits = ctx_.info().props.limits;
    if (key.spec[0] > limits.maxComputeWorkGroupInvocations || key.spec[0] > limits.maxComputeWorkGroupSize[0])
        return fail(KVRT_ERROR_UNSUPPORTED, "workgroup size %u of '%s' exceeds the device limit",
                    key.spec[0], key.shader.c_str());
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

    std::vector<VkSpecializationMapEntry> entries(key.spec.size());
    for (uint32_t i = 0; i < key.spec.size(); ++i) {
        entries[i].constantID = i;
        entries[i].offset = i * sizeof(uint32_t);
        entries[i].size = sizeof(uint32_t);
    }
    VkSpecializationInfo spec{};
    spec.mapEntryCount = static_cast<uint32_t>(entries.size());
    spec.pMapEntries = entries.data();
    spec.dataSize = key.spec.size() * sizeof(uint32_t);
    spec.pData = key.spec.data();

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
    auto [it, inserted] = pipelines_.emplace(key, p);
    (void)inserted;
    *out = &it->second;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::vk
