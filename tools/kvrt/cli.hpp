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

// Reads option --<name> as a cache element type (f32, f16, q8_0, q4_0; `def`
// when absent) into *out and its text into *text (may be NULL); prints an
// error and returns false for an unknown name.
bool type_option(const Args& args, const char* name, const char* def, kvrt_type* out, std::string* text);

// Prints "error: <what>: <result> (<detail>)" to stderr and returns 1.
int report(const char* what, kvrt_result r);

// Escapes a string for JSON output.
std::string json_escape(const std::string& s);

// Log callback printing warnings and errors to stderr (the library never prints).
void log_to_stderr(void* user, kvrt_log_level level, const char* message);

int cmd_info(int argc, char** argv);
int cmd_estimate(int argc, char** argv);

}  // namespace cli
