// All-or-nothing calls of a stateful object (a cache, a memory): record GPU
// work, change the object's metadata, and either keep both or neither.
//
// A Transaction runs on the caller's stream (which must be recording) or, for
// a synchronous call (stream NULL), on the object's PrivateStream, which it
// submits and waits for. While the call runs it collects undo actions, each
// restoring metadata the call changed. Then:
// - the call fails (the Transaction is destroyed uncommitted): a private
//   recording is dropped, and the undos run at once, newest first;
// - synchronous, submit() fails (submission, wait, timeout): the same;
// - commit(): a synchronous call's undos are discarded (its work completed);
//   a caller's stream gets them (vk::Stream::on_abort), to run if that
//   recording is dropped or its submission fails. Undos registered after
//   commit() go to the caller's stream as well (a synchronous call's work is
//   done: nothing to undo).
// The metadata of a caller's stream therefore changes at record time, so
// later calls recorded into it see the effects at once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "vk/stream.hpp"

namespace kvrt::vk {

// An object's own stream for its synchronous calls, created on first use.
class PrivateStream {
public:
    // What happens after a synchronous call's wait timed out (its work is
    // submitted and completes later): Wait: the stream is kept and the next
    // begin() waits for that work (up to the context's wait timeout) first;
    // Replace: the stream is released on any failure (its resources go once
    // its work completes) and the next begin() records into a new one.
    enum class AfterFailure { Wait, Replace };

    PrivateStream(Context& ctx, std::string label, AfterFailure policy)
        : ctx_(ctx), label_(std::move(label)), policy_(policy) {}
    PrivateStream(const PrivateStream&) = delete;
    PrivateStream& operator=(const PrivateStream&) = delete;

    // Starts a recording (creating the stream first if needed).
    Result begin(Stream** out);
    // Submits the recording and waits for it.
    Result submit_and_wait();
    // Drops the recording (a no-op when none), after any failure.
    void abort();

private:
    Context& ctx_;
    std::string label_;
    AfterFailure policy_;
    std::unique_ptr<Stream> stream_;
    bool pending_ = false;  // a submission timed out (Wait)
};

class Transaction {
public:
    // `owner` names the object in the caller's stream (Stream::forget_owner).
    Transaction(const void* owner, Stream* caller, PrivateStream& own) : owner_(owner), caller_(caller), own_(own) {}
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    ~Transaction();

    // Checks that the caller's stream is recording, or begins a private
    // recording. A call with no device work need not begin.
    Result begin();
    Stream& stream() const { return *stream_; }
    bool synchronous() const { return caller_ == nullptr; }

    // Registers an undo (see above).
    void on_undo(std::function<void()> undo);
    // From here on, a failure leaves the caller's recording unsubmittable
    // (Stream::mark_broken): for work whose commands must not run once its
    // metadata is restored.
    void break_on_failure(const char* why) { break_why_ = why; }
    // A synchronous submission whose wait times out keeps its changes (the
    // work completes later and the metadata describes what it leaves):
    // submit() then commits before it returns KVRT_ERROR_TIMEOUT.
    void keep_on_timeout() { keep_on_timeout_ = true; }

    // Synchronous and begun: submits and waits (on failure nothing is
    // committed). Otherwise nothing to do.
    Result submit();
    // Accepts the call's changes (see above).
    void commit();
    // submit(), then commit().
    Result finish();

private:
    const void* owner_;
    Stream* caller_;
    PrivateStream& own_;
    Stream* stream_ = nullptr;
    bool began_ = false;
    bool committed_ = false;
    bool keep_on_timeout_ = false;
    const char* break_why_ = nullptr;
    std::vector<std::function<void()>> undos_;
};

}  // namespace kvrt::vk
