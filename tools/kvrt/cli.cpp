#include "cli.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "kv_types.hpp"

namespace cli {

bool Args::parse(int argc, char** argv, const std::vector<std::string>& flags, std::string* error) {
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        if (a.rfind("--", 0) != 0) {
            positional_.push_back(a);
            continue;
        }
        std::string name = a.substr(2), value;
        const size_t eq = name.find('=');
        if (eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
        } else if (std::find(flags.begin(), flags.end(), name) == flags.end()) {
            if (i + 1 >= argc) {
                *error = "option --" + name + " needs a value";
                return false;
            }
            value = argv[++i];
        }
        values_[name] = value;
    }
    return true;
}

std::string Args::str(const std::string& name, const std::string& def) const {
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second;
}

bool Args::u64(const std::string& name, uint64_t def, uint64_t* out, std::string* error) const {
    auto it = values_.find(name);
    if (it == values_.end()) {
        *out = def;
        return true;
    }
    const char* s = it->second.c_str();
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (errno || end == s || *end || it->second[0] == '-') {
        *error = "option --" + name + ": '" + it->second + "' is not a non-negative integer";
        return false;
    }
    *out = v;
    return true;
}

bool Args::f64(const std::string& name, double def, double* out, std::string* error) const {
    auto it = values_.find(name);
    if (it == values_.end()) {
        *out = def;
        return true;
    }
    const char* s = it->second.c_str();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s, &end);
    if (errno || end == s || *end) {
        *error = "option --" + name + ": '" + it->second + "' is not a number";
        return false;
    }
    *out = v;
    return true;
}

bool type_option(const Args& args, const char* name, const char* def, kvrt_type* out, std::string* text) {
    if (!parse_type(args.str(name, def), name, out)) return false;
    if (text) *text = type_name(*out);
    return true;
}

int report(const char* what, kvrt_result r) {
    const char* detail = kvrt_last_error_message();
    std::fprintf(stderr, "error: %s: %s%s%s%s\n", what, kvrt_result_string(r), *detail ? " (" : "", detail,
                 *detail ? ")" : "");
    return 1;
}

std::string json_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out;
}

void log_to_stderr(void*, kvrt_log_level level, const char* message) {
    const char* tag = level >= KVRT_LOG_LEVEL_ERROR ? "error" : level >= KVRT_LOG_LEVEL_WARN ? "warning" : "info";
    std::fprintf(stderr, "kvrt %s: %s\n", tag, message);
}

}  // namespace cli
