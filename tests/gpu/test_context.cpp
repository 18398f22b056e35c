// Contexts, devices, results and handle validation through the C ABI.
#include "app_vulkan.hpp"
#include "gpu_test.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

using namespace kvrt_test;

TEST_CASE("devices are listed with their features", "[context]") {
    uint32_t n = 0;
    KVRT_REQUIRE_OK(kvrt_enumerate_devices(nullptr, &n));
    REQUIRE(n >= 1);
    std::vector<kvrt_device_info> infos(n, kvrt_device_info KVRT_DEVICE_INFO_INIT);
    KVRT_REQUIRE_OK(kvrt_enumerate_devices(infos.data(), &n));
    for (uint32_t i = 0; i < n; ++i) {
        CHECK(infos[i].index == i);
        CHECK(std::strlen(infos[i].name) > 0);
        CHECK(infos[i].max_storage_buffer_range >= (1u << 16));
        CHECK(infos[i].max_workgroup_invocations >= 128);
        CHECK(infos[i].api_version >= (1u << 22 | 1u << 12));  // Vulkan 1.1
    }

    SECTION("an array that is too small is an error that still fills what fits") {
        if (n >= 2) {
            uint32_t one = 1;
            CHECK(kvrt_enumerate_devices(infos.data(), &one) == KVRT_ERROR_INVALID_ARGUMENT);
            CHECK(one == 1);
        }
        uint32_t zero = 0;
        CHECK(kvrt_enumerate_devices(infos.data(), &zero) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(zero == 0);
    }
    SECTION("NULL count and untyped structs are rejected") {
        CHECK(kvrt_enumerate_devices(nullptr, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
        kvrt_device_info bad = KVRT_DEVICE_INFO_INIT;
        bad.type = KVRT_STRUCT_TYPE_UNDEFINED;
        uint32_t one = 1;
        CHECK(kvrt_enumerate_devices(&bad, &one) == KVRT_ERROR_INVALID_ARGUMENT);
    }
}

TEST_CASE("a context reports its device, features and limits", "[context]") {
    GpuContext ctx;
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
    CHECK(std::strlen(info.name) > 0);
    CHECK(info.subgroup_size >= 1);
    CHECK(info.max_shared_memory_bytes >= 16384);
    CHECK(info.max_push_constants_bytes >= 128);
    CHECK(info.max_storage_buffer_range > 0);
    if (std::strncmp(info.name, "llvmpipe", 8) == 0) {  // not under a device profile
        // lavapipe: the CI device. Its facts are documented in DEVICE-NOTES;
        // these hold on every CPU it runs on (x86_64, aarch64, 32-bit ARM).
        CHECK(info.device_type == KVRT_DEVICE_TYPE_CPU);
        CHECK(info.max_storage_buffer_range == (128u << 20));
        CHECK((info.features & KVRT_DEVICE_FEATURE_TIMESTAMPS) != 0);
        CHECK((info.subgroup_ops & KVRT_SUBGROUP_OP_ARITHMETIC) != 0);
    }
    // The optional features kvrt reports are the ones Vulkan reports for the
    // device (lavapipe's 16-bit float arithmetic, for one, depends on the
    // host CPU: x86_64 with F16C has it, aarch64 does not).
    AppVulkan app;
    VkPhysicalDeviceProperties props{};
    app.instance_fn<PFN_vkGetPhysicalDeviceProperties>("vkGetPhysicalDeviceProperties")(app.pd, &props);
    if (std::strcmp(props.deviceName, info.name) == 0) {
        VkPhysicalDeviceShaderFloat16Int8Features f16i8{};
        f16i8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
        VkPhysicalDevice16BitStorageFeatures s16{};
        s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
        s16.pNext = &f16i8;
        VkPhysicalDeviceFeatures2 feats{};
        feats.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
        feats.pNext = &s16;
        app.instance_fn<PFN_vkGetPhysicalDeviceFeatures2>("vkGetPhysicalDeviceFeatures2")(app.pd, &feats);
        INFO("Vulkan: shaderFloat16 " << f16i8.shaderFloat16 << ", storageBuffer16BitAccess "
                                      << s16.storageBuffer16BitAccess << "; kvrt features 0x" << std::hex
                                      << info.features);
        CHECK(((info.features & KVRT_DEVICE_FEATURE_SHADER_FLOAT16) != 0) == (f16i8.shaderFloat16 == VK_TRUE));
        CHECK(((info.features & KVRT_DEVICE_FEATURE_STORAGE_16BIT) != 0) ==
              (s16.storageBuffer16BitAccess == VK_TRUE));
        CHECK(((info.features & KVRT_DEVICE_FEATURE_SHADER_INT8) != 0) == (f16i8.shaderInt8 == VK_TRUE));
        CHECK(app.validation_errors == 0);
    }
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &stats));
    CHECK(stats.validation_errors == 0);

    CHECK(kvrt_context_get_device_info(ctx, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    kvrt_device_info untyped = KVRT_DEVICE_INFO_INIT;
    untyped.type = KVRT_STRUCT_TYPE_UNDEFINED;
    CHECK(kvrt_context_get_device_info(ctx, &untyped) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_context_get_stats(ctx, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("context creation checks its arguments", "[context]") {
    CHECK(kvrt_context_create(nullptr, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    kvrt_context ctx = reinterpret_cast<kvrt_context>(0x1);
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;

    desc.type = KVRT_STRUCT_TYPE_BUFFER_DESC;
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
    // The message names the struct expected and how to get its type right.
    const std::string message = kvrt_last_error_message();
    INFO(message);
    CHECK(message.find("kvrt_context_desc") != std::string::npos);
    CHECK(message.find("_INIT") != std::string::npos);

    desc = kvrt_context_desc KVRT_CONTEXT_DESC_INIT;
    desc.flags = 0x80000000u;
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);

    desc = kvrt_context_desc KVRT_CONTEXT_DESC_INIT;
    desc.log_level = static_cast<kvrt_log_level>(42);
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);

    desc = kvrt_context_desc KVRT_CONTEXT_DESC_INIT;
    desc.max_binding_bytes = 100;
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("the device can be picked by index or name", "[context]") {
    // desc->device stands whatever KVRT_DEVICE says: these run under any.
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    kvrt_context ctx = nullptr;

    desc.device = "0";
    KVRT_REQUIRE_OK(kvrt_context_create(&desc, &ctx));
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
    CHECK(info.index == 0);
    const std::string name = info.name;
    kvrt_context_destroy(ctx);

    // A case-insensitive substring of the name.
    std::string sub = name.substr(0, std::min<size_t>(4, name.size()));
    for (char& c : sub) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    desc.device = sub.c_str();
    KVRT_REQUIRE_OK(kvrt_context_create(&desc, &ctx));
    kvrt_context_destroy(ctx);

    desc.device = "no such device anywhere";
    ctx = reinterpret_cast<kvrt_context>(0x1);
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_UNSUPPORTED);
    CHECK(ctx == nullptr);
    CHECK(std::string(kvrt_last_error_message()).find(name) != std::string::npos);  // lists the devices

    desc.device = "999";
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_UNSUPPORTED);
}

TEST_CASE("KVRT_DEVICE picks the device only where desc->device leaves it to kvrt", "[context]") {
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    kvrt_context ctx = nullptr;
    uint32_t n_devices = 0;
    KVRT_REQUIRE_OK(kvrt_enumerate_devices(nullptr, &n_devices));
    REQUIRE(n_devices >= 1);
    const std::string last = std::to_string(n_devices - 1);
    {
        // Left open (NULL or ""): the variable chooses, also a device that
        // does not exist.
        ScopedEnv env("KVRT_DEVICE", last.c_str());
        for (const char* open : {static_cast<const char*>(nullptr), ""}) {
            desc.device = open;
            KVRT_REQUIRE_OK(kvrt_context_create(&desc, &ctx));
            kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
            KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
            CHECK(info.index == n_devices - 1);
            kvrt_context_destroy(ctx);
        }
    }
    {
        ScopedEnv env("KVRT_DEVICE", "no device has this name");
        desc.device = nullptr;
        ctx = reinterpret_cast<kvrt_context>(0x1);
        CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_UNSUPPORTED);
        CHECK(ctx == nullptr);
        // An explicit index stands, and the log says the variable was ignored.
        bool ignored = false;
        desc.device = "0";
        desc.log_level = KVRT_LOG_LEVEL_INFO;
        desc.log_user_data = &ignored;
        desc.log_callback = [](void* user, kvrt_log_level, const char* message) {
            if (std::string(message).find("KVRT_DEVICE") != std::string::npos &&
                std::string(message).find("ignored") != std::string::npos)
                *static_cast<bool*>(user) = true;
        };
        KVRT_REQUIRE_OK(kvrt_context_create(&desc, &ctx));
        kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
        CHECK(info.index == 0);
        CHECK(ignored);
        kvrt_context_destroy(ctx);
    }
    {
        // An explicit name that matches nothing is not rescued by the variable.
        ScopedEnv env("KVRT_DEVICE", "0");
        desc = kvrt_context_desc KVRT_CONTEXT_DESC_INIT;
        desc.device = "no device has this name";
        CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_UNSUPPORTED);
        CHECK(ctx == nullptr);
    }
}

TEST_CASE("results have names and a thread-local detail", "[context]") {
    CHECK(std::string(kvrt_result_string(KVRT_SUCCESS)).rfind("KVRT_SUCCESS", 0) == 0);
    CHECK(std::string(kvrt_result_string(KVRT_ERROR_CACHE_FULL)).rfind("KVRT_ERROR_CACHE_FULL", 0) == 0);
    CHECK(std::string(kvrt_result_string(static_cast<kvrt_result>(-1000))).rfind("KVRT_ERROR_UNKNOWN", 0) == 0);
    // Pinned values.
    STATIC_REQUIRE(KVRT_ERROR_INVALID_ARGUMENT == -1);
    STATIC_REQUIRE(KVRT_ERROR_INVALID_HANDLE == -2);
    STATIC_REQUIRE(KVRT_ERROR_TIMEOUT == -6);
    STATIC_REQUIRE(KVRT_ERROR_CACHE_FULL == -7);
    STATIC_REQUIRE(KVRT_ERROR_INTERNAL == -12);
    CHECK(kvrt_version() == KVRT_VERSION);
    CHECK(std::string(kvrt_version_string()) == std::to_string(KVRT_VERSION_MAJOR) + "." +
                                                   std::to_string(KVRT_VERSION_MINOR) + "." +
                                                   std::to_string(KVRT_VERSION_PATCH));

    CHECK(kvrt_buffer_get_size(nullptr, nullptr) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(std::string(kvrt_last_error_message()) == "buffer is NULL");
}

TEST_CASE("destroyed, foreign and mixed-up handles are rejected", "[context]") {
    GpuContext ctx;
    kvrt_buffer buf = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = 256;
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &buf));
    kvrt_stream stream = nullptr;
    KVRT_REQUIRE_OK(kvrt_stream_create(ctx, nullptr, &stream));

    uint64_t size = 0;
    // A stream passed where a buffer is expected.
    CHECK(kvrt_buffer_get_size(reinterpret_cast<kvrt_buffer>(stream), &size) == KVRT_ERROR_INVALID_HANDLE);
    // A context passed as a stream.
    CHECK(kvrt_stream_begin(reinterpret_cast<kvrt_stream>(ctx.get())) == KVRT_ERROR_INVALID_HANDLE);
    // A pointer kvrt never gave out.
    int local = 0;
    CHECK(kvrt_buffer_get_size(reinterpret_cast<kvrt_buffer>(&local), &size) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_context_get_stats(reinterpret_cast<kvrt_context>(&local), nullptr) == KVRT_ERROR_INVALID_HANDLE);

    kvrt_buffer_destroy(buf);
    CHECK(kvrt_buffer_get_size(buf, &size) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_buffer_upload(buf, 0, &local, 4) == KVRT_ERROR_INVALID_HANDLE);
    kvrt_buffer_destroy(buf);  // a second destroy is harmless
    kvrt_stream_destroy(stream);
    CHECK(kvrt_stream_begin(stream) == KVRT_ERROR_INVALID_HANDLE);
    kvrt_buffer_destroy(nullptr);
    kvrt_stream_destroy(nullptr);
    kvrt_context_destroy(nullptr);
}

TEST_CASE("destroying a context destroys its buffers and streams", "[context]") {
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    desc.flags = KVRT_CONTEXT_VALIDATION;
    kvrt_context ctx = nullptr;
    KVRT_REQUIRE_OK(kvrt_context_create(&desc, &ctx));
    kvrt_buffer buf = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = 1024;
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &buf));
    kvrt_stream stream = nullptr;
    KVRT_REQUIRE_OK(kvrt_stream_create(ctx, nullptr, &stream));
    // Leave work in flight when the context goes.
    KVRT_REQUIRE_OK(kvrt_stream_begin(stream));
    KVRT_REQUIRE_OK(kvrt_cmd_fill(stream, buf, 0, 1024, 7));
    KVRT_REQUIRE_OK(kvrt_stream_submit(stream));
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &stats));
    CHECK(stats.validation_errors == 0);
    CHECK(stats.device_bytes >= 1024);
    CHECK(stats.submissions >= 1);
    kvrt_context_destroy(ctx);
    uint64_t size = 0;
    CHECK(kvrt_buffer_get_size(buf, &size) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_stream_wait(stream, 0) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_context_get_stats(ctx, &stats) == KVRT_ERROR_INVALID_HANDLE);
}
