// Shared pieces of the kvrt command-line program.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kvrt/kvrt.h"

namespace cli {

// Parsed `--name value` / `--flag` options of one subcommand.
class Args {
public:
    // `flags` lists options that take no value.
    bool parse(int argc, char** argv, const std::vector<std::string>& flags, std::string* error);
    bool has(const std::string& name) const { return values_.count(name) != 0; }
    std::string str(const std::string& name, const std::string& def = "") const;
    // Parses an integer option; false with a message when malformed.
    bool u64(const std::string& name, uint64_t def, uint64_t* out, std::string* error) const;
    bool f64(const std::string& name, double def, double* out, std::string* error) const;
    const std::vector<std::string>& positional() const { return positional_; }

private:
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
};

// Reads option --<name> as an element type, by the library's names (`def`
// when absent), into *out and its name into *text (may be NULL); prints an
// error and returns false for an unknown name.
bool type_option(const Args& args, const char* name, const char* def, kvrt_type* out, std::string* text);

// The structs the tools pass by pointer, each started from its KVRT_*_INIT
// macro with the fields a call sets.
inline kvrt_batch make_batch(uint32_t n_tokens, const int32_t* positions, const int32_t* seq_ids,
                             const uint32_t* seq_id_counts = nullptr) {
    kvrt_batch b = KVRT_BATCH_INIT;
    b.n_tokens = n_tokens;
    b.positions = positions;
    b.seq_id_counts = seq_id_counts;
    b.seq_ids = seq_ids;
    return b;
}

inline kvrt_tensor_ref host_tensor(const void* data, kvrt_type element_type = KVRT_TYPE_F32) {
    kvrt_tensor_ref t = KVRT_TENSOR_REF_INIT;
    t.host = data;
    t.element_type = element_type;
    return t;
}

inline kvrt_tensor_ref buffer_tensor(kvrt_buffer buffer, uint64_t offset, kvrt_type element_type = KVRT_TYPE_F32,
                                     uint64_t row_stride = 0, uint64_t layer_stride = 0) {
    kvrt_tensor_ref t = KVRT_TENSOR_REF_INIT;
    t.buffer = buffer;
    t.element_type = element_type;
    t.offset = offset;
    t.row_stride = row_stride;
    t.layer_stride = layer_stride;
    return t;
}

inline kvrt_output_ref host_output(void* data, kvrt_type element_type = KVRT_TYPE_F32) {
    kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
    o.host = data;
    o.element_type = element_type;
    return o;
}

inline kvrt_output_ref buffer_output(kvrt_buffer buffer, uint64_t offset, kvrt_type element_type = KVRT_TYPE_F32) {
    kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
    o.buffer = buffer;
    o.element_type = element_type;
    o.offset = offset;
    return o;
}

// Prints "error: <what>: <result> (<detail>)" to stderr and returns 1.
int report(const char* what, kvrt_result r);

// Escapes a string for JSON output.
std::string json_escape(const std::string& s);

// Log callback printing warnings and errors to stderr (the library never prints).
void log_to_stderr(void* user, kvrt_log_level level, const char* message);

int cmd_info(int argc, char** argv);
int cmd_estimate(int argc, char** argv);

}  // namespace cli
