#include "hash_pipeline.hpp"

#include <system_error>

namespace kiln::storage {

HashPipeline::~HashPipeline() {
  {
    std::lock_guard<std::mutex> g(mu_);
    abandon_ = true;
  }
  stop();
}

bool HashPipeline::start() {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {
    return false;  // no thread to be had (limits): hashing inline costs only time
  }
  return true;
}

void HashPipeline::push(std::span<const std::byte> piece) {
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(piece);
  }
  ++pushed_;
  cv_.notify_all();
}

void HashPipeline::wait_hashed(std::uint64_t pieces) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return hashed_ >= pieces; });
}

Digest HashPipeline::finish() {
  stop();
  return hash_.finish();
}

void HashPipeline::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HashPipeline::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return !queue_.empty() || closed_; });
    if (abandon_ || queue_.empty()) return;  // closed and drained, or abandoned
    auto piece = queue_.front();
    queue_.pop_front();
    lk.unlock();
    hash_.update(piece);
    lk.lock();
    ++hashed_;
    cv_.notify_all();
  }
}

}  // namespace kiln::storage
