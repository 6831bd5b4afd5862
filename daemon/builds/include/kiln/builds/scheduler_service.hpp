// kiln/builds/scheduler_service.hpp — the scheduler behind kilnd's build operations: implements
// kiln::daemon::BuildService (GET with on_miss=build, BUILD, PREWARM_SUBMIT, BUILD_STATUS)
// over a BuildScheduler.
//
//  - ensure(): an interactive request; it waits up to wait_ms (0 = `default_wait`; 0 there
//    too = until the build ends) and then leaves with Errc::timeout. Its handle's
//    withdraw() leaves at once (done() gets Errc::cancelled). A build whose last waiter
//    leaves, and that no prewarm wants, is stopped (SchedulerOptions::cancel_unwanted).
//  - submit(): prewarm requests: queued behind interactive ones, kept alive with nobody
//    waiting. Each valid submitted key gets one terminal event ("done" or "failed"; keys
//    already stored get "done" at once); a "running" event when its build starts. The last
//    terminal event carries last=true; with no valid key, one event with an all-zero digest
//    and state "done" carries it.
//  - status(): builds by handle (the most recent 1024 handles are kept), by key digest,
//    or all that the scheduler knows (queued, running, and its recent finished ones).
//
// Thread safety: as BuildService: every method from any thread.
#pragma once

#include <memory>

#include "kiln/builds/scheduler.hpp"
#include "kiln/daemon/build_service.hpp"

namespace kiln::build {

// `scheduler` and `store` are not owned and must outlive the service.
std::unique_ptr<daemon::BuildService> make_scheduler_service(BuildScheduler& scheduler, storage::Store& store,
                                                         std::chrono::milliseconds default_wait);

}  // namespace kiln::build
