// Helpers for the scheduler tests: a store in a TempDir, sources that command the test
// worker (tests/support/test_worker.cpp), keys for the test node, counting builds.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/builds/scheduler.hpp"
#include "kiln/key.hpp"
#include "kiln/storage/store.hpp"
#include "temp_dir.hpp"
#include "wait_until.hpp"

namespace kiln::test {

using Outcome = Result<storage::ArtifactInfo>;

// One request's answer from the scheduler: the callback to give it, the Waiter it returns
// (dropping it leaves the build), and the outcome once it comes.
struct Pending {
  std::shared_ptr<std::promise<Outcome>> promise = std::make_shared<std::promise<Outcome>>();
  std::future<Outcome> future = promise->get_future();
  std::unique_ptr<build::Waiter> waiter;

  build::BuildCallback callback() {
    return [p = promise](Outcome r) { p->set_value(std::move(r)); };
  }
  // The outcome; the test fails (REQUIRE) when none comes within `limit`.
  Outcome get(std::chrono::seconds limit = std::chrono::seconds(30)) {
    REQUIRE(future.wait_for(limit) == std::future_status::ready);
    return future.get();
  }
  bool answered() { return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
};

// A file the test worker waits on while it exists (a source's "holds"): a build that stays
// running until the test is ready, not for a time a loaded machine may outlast.
struct Hold {
  std::filesystem::path file;
  explicit Hold(std::filesystem::path f) : file(std::move(f)) { std::ofstream(file) << "held\n"; }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold() { release(); }
  // The value of a source's "holds": every build of it waits.
  nlohmann::json holds() const { return nlohmann::json::array({{{"file", file.string()}, {"only", ""}}}); }
  void release() {
    std::error_code ec;
    std::filesystem::remove(file, ec);
  }
};

inline std::string message(const Outcome& r) { return r ? "ok" : r.error().to_string(); }

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::size_t count_lines(const std::filesystem::path& p) {
  std::string s = read_text(p);
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

struct BuildFixture {
  TempDir dir;
  std::unique_ptr<storage::Store> store;
  build::SchedulerOptions options;
  NodeFields host;
  std::filesystem::path count_file;

  BuildFixture() {
    storage::StoreOptions so;
    so.root = dir / "store";
    auto s = storage::Store::open(so);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
    store = std::move(*s);
    options.worker.argv = {KILN_TEST_WORKER};
    options.work_dir = dir / "work";
    options.probe_gpus = false;
    options.slots = {build::SlotConfig{"gpu0", "sm_test", "Test GPU", "", 0}};
    options.build_timeout = std::chrono::seconds(20);
    options.probe_timeout = std::chrono::seconds(20);
    host.platform = "linux";
    host.machine = "x86_64";
    host.cpu_isa = "test-isa";
    count_file = dir / "builds.txt";
  }

  // Registers a source whose content commands the test worker; returns its model hash.
  std::string add_source(nlohmann::json command) {
    command["count_file"] = count_file.string();
    std::string text = command.dump();
    std::string hash = sha256(text).hex();
    auto stream = store->begin_put();
    REQUIRE(stream.has_value());
    REQUIRE((*stream)->write(std::as_bytes(std::span(text.data(), text.size()))).has_value());
    auto info = store->put_source(hash, std::move(*stream), "test-source.json");
    REQUIRE_MESSAGE(info.has_value(), (info ? "" : info.error().to_string()));
    return hash;
  }

  // A complete key for the test node (the test worker's toolchain, slot gpu0).
  Key key(const std::string& model_hash, const std::string& region = "Block") const {
    Key k;
    k.kind = ArtifactKind::aoti;
    k.model_hash = model_hash;
    k.region = region;
    k.gpu_arch = "sm_test";
    k.gpu_name = "Test GPU";
    k.torch_version = "test-torch";
    k.torch_git = "test-git";
    k.cuda_version = "test-cuda";
    k.triton_version = "test-triton";
    k.platform = "linux";
    k.machine = "x86_64";
    k.cpu_isa = "test-isa";
    k.dtype = "bfloat16";
    k.inputs = {{{Dim::fixed(1), Dim::fixed(4608), Dim::fixed(3072)}, "bfloat16", "strided"}};
    return k;
  }

  std::unique_ptr<build::BuildScheduler> scheduler() {
    auto s = build::BuildScheduler::create(options, *store, host);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
    return std::move(*s);
  }

  std::size_t builds() const { return count_lines(count_file); }
};

}  // namespace kiln::test
