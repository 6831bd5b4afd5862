// StoreImpl: the fleet tier's records (signatures, push queue). See kiln/storage/store.hpp.
#include "store_impl.hpp"

namespace kiln::storage {

Status StoreImpl::put_signature(const SignatureRecord& record) {
  KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  return index_.put_signature(record);
}

Result<std::optional<SignatureRecord>> StoreImpl::signature(const std::string& subject) {
  std::lock_guard<std::mutex> guard(mu_);
  return index_.get_signature(subject);
}

Status StoreImpl::enqueue_push(const std::string& subject) {
  KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  return index_.enqueue_push(subject, now());
}

Result<std::vector<PushItem>> StoreImpl::pending_pushes(std::int64_t due_before, std::size_t limit) {
  std::lock_guard<std::mutex> guard(mu_);
  return index_.pending_pushes(due_before, limit);
}

Status StoreImpl::push_done(const std::string& subject) {
  KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  return index_.erase_push(subject);
}

Status StoreImpl::push_failed(const std::string& subject, std::int64_t next_attempt_at, const std::string& error) {
  KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  return index_.push_failed(subject, next_attempt_at, error);
}

}  // namespace kiln::storage
