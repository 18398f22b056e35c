#include "core/log.hpp"

#include <cstdio>

namespace kvrt {

Logger::Logger(kvrt_log_fn fn, void* user, kvrt_log_level min_level)
    : fn_(fn), user_(user),
      min_level_(min_level == KVRT_LOG_LEVEL_DEFAULT ? KVRT_LOG_LEVEL_WARN : min_level) {}

void Logger::log(kvrt_log_level level, const char* fmt, ...) const {
    if (!enabled(level)) return;
    va_list args;
    va_start(args, fmt);
    vlog(level, fmt, args);
    va_end(args);
}

void Logger::vlog(kvrt_log_level level, const char* fmt, va_list args) const {
    if (!enabled(level)) return;
    char buf[2048];
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    fn_(user_, level, buf);
}

}  // namespace kvrt
