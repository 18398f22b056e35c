// The C side of the log callback: kvrt calls kvrtGoLogTrampoline, which
// hands the message to the exported Go function kvrtGoLog together with the
// context's cgo.Handle (carried in log_user_data as an integer).
#include <stdint.h>

#include <kvrt/kvrt.h>

#include "_cgo_export.h"

void kvrtGoLogTrampoline(void* user_data, kvrt_log_level level, const char* message) {
    kvrtGoLog((uintptr_t)user_data, (int)level, (char*)message);
}
