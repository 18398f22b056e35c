#include "vk/transaction.hpp"

namespace kvrt::vk {

Result PrivateStream::begin(Stream** out) {
    Result r = KVRT_SUCCESS;
    if (!stream_) r = Stream::create(ctx_, false, 0, label_.c_str(), &stream_);
    if (r == KVRT_SUCCESS && pending_) {
        // A previous call timed out; its work must end first.
        r = stream_->wait(ctx_.options().wait_timeout_ns);
        if (r == KVRT_SUCCESS) pending_ = false;
    }
    if (r == KVRT_SUCCESS) r = stream_->begin();
    if (r != KVRT_SUCCESS) {
        if (policy_ == AfterFailure::Replace) stream_.reset();
        return r;
    }
    *out = stream_.get();
    return KVRT_SUCCESS;
}

Result PrivateStream::submit_and_wait() {
    Result r = stream_->submit();
    if (r == KVRT_SUCCESS) {
        pending_ = true;
        r = stream_->wait(ctx_.options().wait_timeout_ns);
        if (r == KVRT_SUCCESS) pending_ = false;
    }
    if (r != KVRT_SUCCESS && policy_ == AfterFailure::Replace) abort();
    return r;
}

void PrivateStream::abort() {
    if (policy_ == AfterFailure::Replace) {
        // A submission that timed out finishes on its own; its resources go
        // afterwards (Stream's destructor).
        stream_.reset();
        pending_ = false;
    } else if (stream_) {
        stream_->abort();
    }
}

Transaction::~Transaction() {
    if (committed_) return;
    if (caller_ && break_why_) caller_->mark_broken(break_why_);
    if (!caller_ && began_) own_.abort();
    for (auto it = undos_.rbegin(); it != undos_.rend(); ++it) (*it)();
}

Result Transaction::begin() {
    if (caller_) {
        KVRT_TRY(caller_->require_recording());
        stream_ = caller_;
    } else {
        KVRT_TRY(own_.begin(&stream_));
    }
    began_ = true;
    return KVRT_SUCCESS;
}

void Transaction::on_undo(std::function<void()> undo) {
    if (!committed_) undos_.push_back(std::move(undo));
    else if (caller_) caller_->on_abort(owner_, std::move(undo));
}

Result Transaction::submit() {
    if (caller_ || !began_) return KVRT_SUCCESS;
    const Result r = own_.submit_and_wait();
    if (r == KVRT_ERROR_TIMEOUT && keep_on_timeout_) commit();
    return r;
}

void Transaction::commit() {
    committed_ = true;
    if (caller_)
        for (std::function<void()>& undo : undos_) caller_->on_abort(owner_, std::move(undo));
    undos_.clear();
}

Result Transaction::finish() {
    KVRT_TRY(submit());
    commit();
    return KVRT_SUCCESS;
}

}  // namespace kvrt::vk
