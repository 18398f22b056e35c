// The SPIR-V of every kernel, embedded at build time (cmake/KvrtShaders.cmake).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvrt::spirv {

struct ShaderBlob {
    const char* name;
    const uint32_t* words;
    size_t count;  // number of 32-bit words
};

// Generated: every shader, sorted by name.
extern const ShaderBlob kShaders[];
extern const size_t kShaderCount;

// The embedded shader called `name`, or nullptr.
const ShaderBlob* find_shader(const char* name);

}  // namespace kvrt::spirv
