// One run per name at a time, shared: the first caller of run(name, work) (the leader)
// runs `work`; callers that ask for the same name while it runs wait for it and get the
// same result (or the same exception). The fleet's pulls of artifacts and sources use it,
// so concurrent misses of one key cost the registry one lookup. Thread-safe.
#pragma once

#include <exception>
#include <future>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln::fleet {

template <class T>
class SingleFlight {
 public:
  template <class Work>
  T run(const std::string& name, Work&& work) {
    std::promise<T> promise;
    std::shared_future<T> fut;
    {
      std::lock_guard lock(mu_);
      if (auto it = flights_.find(name); it != flights_.end()) {
        fut = it->second;
      } else {
        flights_.emplace(name, promise.get_future().share());
        fut = {};
      }
    }
    if (fut.valid()) return fut.get();
    try {
      T got = work();
      promise.set_value(got);
      forget(name);
      return got;
    } catch (...) {
      promise.set_exception(std::current_exception());
      forget(name);
      throw;
    }
  }

 private:
  void forget(const std::string& name) {
    std::lock_guard lock(mu_);
    flights_.erase(name);
  }

  std::mutex mu_;
  std::unordered_map<std::string, std::shared_future<T>> flights_;  // guarded by mu_
};

}  // namespace kiln::fleet
