// Logging through the application's callback only; the library never prints.
#pragma once

#include <cstdarg>

#include "kvrt/kvrt.h"

namespace kvrt {

class Logger {
public:
    Logger() = default;
    Logger(kvrt_log_fn fn, void* user, kvrt_log_level min_level);

    // Formats and delivers a message when `level` reaches the threshold and a
    // callback is set. Thread-safety: Safe: the Logger never changes after
    // creation and formats on the caller's stack. The callback may thus run
    // on several threads at once, and with kvrt's own locks held (a
    // validation message during a submission), which is why it must not call
    // back into kvrt (kvrt_log_fn).
    void log(kvrt_log_level level, const char* fmt, ...) const
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;

    void vlog(kvrt_log_level level, const char* fmt, va_list args) const;

    bool enabled(kvrt_log_level level) const { return fn_ && level >= min_level_; }

private:
    kvrt_log_fn fn_ = nullptr;
    void* user_ = nullptr;
    kvrt_log_level min_level_ = KVRT_LOG_LEVEL_WARN;
};

}  // namespace kvrt
