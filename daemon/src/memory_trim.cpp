// Deferred malloc_trim after bursts (see memory_trim.hpp).
#include "memory_trim.hpp"

#include <malloc.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kiln::daemon {

namespace {

constexpr std::chrono::milliseconds kTrimDelay{250};

struct Trimmer {
  std::mutex mu;
  std::condition_variable cv;
  bool wanted = false;  // guarded by mu
  bool started = false;

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [this] { return wanted; });
      // Let the burst's last frees land; later requests during the wait are merged.
      cv.wait_for(lock, kTrimDelay, [] { return false; });
      wanted = false;
      lock.unlock();
      ::malloc_trim(0);
      lock.lock();
    }
  }
};

Trimmer& trimmer() {
  // Never destroyed: the detached thread waits on its condition variable for the process's
  // life, and glibc's pthread_cond_destroy at exit waits for that waiter: a static Trimmer
  // made kilnd hang in its exit handlers after every clean stop that had trimmed once.
  static Trimmer* t = new Trimmer;
  return *t;
}

}  // namespace

void trim_heap_soon() {
  auto& t = trimmer();
  std::lock_guard lock(t.mu);
  t.wanted = true;
  if (!t.started) {
    t.started = true;
    // Lives as long as the process: it only ever waits or trims, and holds nothing.
    std::thread([&t] { t.run(); }).detach();
  }
  t.cv.notify_one();
}

}  // namespace kiln::daemon
