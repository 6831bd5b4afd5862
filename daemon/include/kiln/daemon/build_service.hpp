// kiln/daemon/build_service.hpp — the seam between the socket server and the build
// scheduler (daemon/builds/). The server calls it; the scheduler implements it.
//
// Without a BuildService (nullptr), kilnd answers BUILD, PREWARM_SUBMIT, BUILD_STATUS and
// GET with on_miss=build with Errc::unsupported, and does not list the "build"
// capability in hello.
//
// Thread safety: every method may be called from any thread, concurrently. Methods must
// not block on a build: long work happens elsewhere and is reported through callbacks.
// Callbacks may be invoked from any thread (including inside the call, synchronously)
// and exactly once unless stated otherwise; the server re-posts them to its own executor.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"

namespace kiln::daemon {

struct EnsureOptions {
  bool force = false;                   // rebuild even if stored; ignore a recent failure
  // Give up (Errc::timeout) after this long. 0 = until the build ends (the build itself
  // is bounded by the daemon's build timeout).
  std::uint32_t wait_ms = 0;
  // A prewarm's key (PREWARM_SUBMIT, BUILD without wait, handed to ensure() by a service in
  // front of the scheduler, the fleet's): its build queues behind interactive ones.
  bool prewarm = false;
  // An idle build (BUILD without wait, "idle": a faster variant of a package kiln.torch
  // already serves): runs only on a slot with nothing else running or queued, and is set
  // aside, to be run again later, when another build comes for that slot. Implies prewarm.
  bool idle = false;
  // Called once when the build this caller waits on starts running on this node (not for
  // a key already stored, pulled, or a build already running). Optional; any thread.
  std::function<void()> on_start;
};

// How submit() builds its keys (EnsureOptions' fields of the same names).
struct SubmitOptions {
  bool force = false;
  bool idle = false;
};

// One ensure() caller's hold on its build. The build goes on while anyone wants it (a
// waiter or a prewarm); when the last waiter leaves, the daemon may stop it.
class BuildWait {
 public:
  virtual ~BuildWait() = default;
  // The caller stops waiting (its client disconnected or cancelled). If done() has not
  // been called yet it is called now, exactly once, with Errc::cancelled ("withdrawn"),
  // and the waiter leaves the build; after done() it does nothing. Idempotent; any thread;
  // may be called from inside done(). Destroying the handle does NOT withdraw: done() is
  // then still called with the outcome.
  virtual void withdraw() = 0;
};

// One PUT_SOURCE's bytes, held in a file of the build service's so that the node's build
// worker can hash them BEFORE anything is stored (schema/sources.md, "A hash is verified,
// never trusted"). Destroying it removes the file (blocking file I/O: destroy it where
// blocking work runs, not on an I/O thread).
class SourceCheck {
 public:
  virtual ~SourceCheck() = default;
  // Appends uploaded bytes. Blocking file I/O: call it off the event loop. io_error when
  // the file cannot be written.
  virtual Status write(std::span<const std::byte> data) = 0;
  // Runs the build worker's `hash` op on what was written, on the build service's own
  // threads (never the caller's), bounded by [builds] source_check_timeout_s. done() is
  // called exactly once, from any thread, with the model hash the file hashes to: when
  // `model_hash` is given, only if it is that one (an uploader that sent none learns it
  // here: the node computes model hashes); invalid_argument when it hashes to another
  // model hash (the message names both) or the
  // worker cannot hash it (not a torch.export archive it can load: the worker's own error);
  // timeout when the worker ran past the limit (its process group is killed); cancelled
  // when kilnd shuts down. Call it once, after the last write().
  virtual void verify(const std::string& model_hash, std::function<void(Result<std::string>)> done) = 0;
};

class BuildService {
 public:
  virtual ~BuildService() = default;

  // Makes sure `key` (complete: node fields already filled, digest computed) is in the
  // store: returns at once (done(ok)) if stored and !force, joins a running build of the
  // same key (single flight), or starts one. done() gets ok once the artifact is in the
  // store, else build_failed (message: the worker's last error line), no_source, timeout,
  // unsupported (no GPU), cancelled (shutdown, or withdrawn). done() is called exactly
  // once, withdrawn or not. The returned handle withdraws this waiter (never null).
  [[nodiscard]] virtual std::shared_ptr<BuildWait> ensure(const Key& key, const Digest& key_digest,
                                                          const EnsureOptions& options,
                                                          std::function<void(Status)> done) = 0;

  // Submits keys without waiting (PREWARM_SUBMIT, BUILD with wait=false). Returns a
  // handle and one result per key, in order. When `on_event` is set it receives a
  // BuildEvent whenever a submitted key starts, finishes or fails; it is called with
  // last=true exactly once, after every key has finished or failed (at once if none is
  // pending). Keys may be incomplete or malformed: their result is state "invalid".
  using EventSink = std::function<void(protocol::BuildEvent event, bool last)>;
  virtual Result<protocol::PrewarmReply> submit(const std::vector<Key>& keys, const SubmitOptions& options,
                                                EventSink on_event) = 0;

  // BUILD_STATUS: builds known by handle, by key digest, or all.
  virtual Result<protocol::BuildStatusReply> status(const protocol::BuildStatusRequest& request) = 0;

  // PUT_SOURCE: a check for one upload when this node verifies sources, which it does
  // exactly when it can build (a build slot, and a worker that reported its toolchain: the
  // torch that builds is the torch that hashes). nullptr when it cannot build: the source
  // is then stored unverified, and the worker's own check before every build stays the
  // guard wherever the source is built later. io_error: the check's file cannot be made.
  // Cheap; never blocks on a build or a worker. The default verifies nothing (nullptr).
  virtual Result<std::unique_ptr<SourceCheck>> begin_source_check() { return std::unique_ptr<SourceCheck>(); }

  // Whether this node builds at all: ok, or unsupported "this node cannot build: <why>"
  // (no build slot; a build worker that has no torch or reported no toolchain), the same
  // for every key. BUILD and PREWARM_SUBMIT ask it first, so that such a node answers one
  // clear error instead of one per key. Cheap; never blocks. The default: ok.
  virtual Status can_build() const { return {}; }

  // STATUS: the node's GPUs as probed at start (or the note saying why none) and each
  // build slot's queue depth now. Cheap, never blocks on a build or runs a probe. The
  // default reports nothing, with a note saying so.
  virtual protocol::GpuReport gpu_report() const {
    protocol::GpuReport r;
    r.note = "this build service does not report GPUs";
    return r;
  }
};

}  // namespace kiln::daemon
