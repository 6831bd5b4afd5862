// kiln_test_worker: a real program speaking the worker protocol (schema/worker-protocol.md)
// that misbehaves on command, standing in for the Python workers where there is no GPU.
//
// The command comes from the SOURCE it is asked to build: a JSON file
//   {"behavior": "ok" | "fail" | "crash" | "hang" | "hang_child" | "garbage" | "nothing" |
//                "two_lines" | "no_file" | "wrong_digest" | "flood" | "ok_then_exit_1",
//    "sleep_ms": 0,                 // before doing it
//    "log": "text",                 // written to stderr (the build log)
//    "pad_bytes": 0,                // the artifact is this much longer (benchmarks)
//    "content_file": "/path",       // the artifact is this file's bytes
//    "probe": {"write": ["/path"],  // try what the sandbox forbids (below)
//              "kiln_socket": "/path/kiln.sock"},
//    "holds": [{"file": "/path",    // after starting, wait while this file exists...
//               "only": "text"}]}   // ...when the output path contains this text ("" = any)
//                                   // (tests hold a node's build, and release it)
// so that one scheduler can hold sources that behave differently.
//
// It writes nothing outside its build's folder (the folder of its output), where kilnd's
// sandbox confines it: tests count builds from kilnd's own log (tests/support/kilnd_builds.hpp).
// In that folder it leaves "test-worker.started" ("<region> <pid> <output path>", as it
// starts building) and, for hang_child, "child.pid"; both are logged too. With "probe" it
// logs one line "test worker: probe uid=<uid> gid=<gid> inet=<ok|errno name>
// inet6=... write:<path>=<ok|errno name> ... tmp=..." before building: what the sandbox let it
// do (an AF_INET and an AF_INET6 socket, creating each named file, a file in $TMPDIR), and
// with "kiln_socket" " kiln_socket=roles:<the roles kilnd's HELLO reply gives it, JSON>"
// (or the errno's name when it cannot connect).
//
// The toolchain op answers
// fixed "test" versions (and cpu_isa "test-worker-isa" unless asked with "host": false), or
// fails when KILN_TEST_WORKER_TOOLCHAIN=fail; it first waits while the file named by
// KILN_TEST_WORKER_TOOLCHAIN_GATE exists (a probe as slow as a test wants). The hash op answers
// the SHA-256 of the source's program as its model hash (the text before a line
// "#example-inputs ...", which plays the example inputs a real archive carries and its
// model hash does not cover; all of it when there is none), with the command's "inputs" and "call"
// (default: none, positional); first it sleeps "hash_sleep_ms", and with "hash_fail": true
// it fails as for a file that is no torch.export archive.
//
// Like the Python worker, a build refuses a key whose model hash is not the source's own
// (the SHA-256 of the program here), and one whose call differs from the command's "call"; and it writes
// every variable of its environment to the build log ("test worker: env NAME=VALUE"), so
// tests can see what reached a worker.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "kiln/digest.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/protocol/messages.hpp"

extern char** environ;

namespace {

using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int answer(const json& j) {
  std::cout << j.dump() << "\n" << std::flush;
  return j.value("ok", false) ? 0 : 1;
}

int fail(const std::string& why) { return answer({{"protocol", 1}, {"ok", false}, {"error", why}}); }

[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

json positional_call(std::size_t n) {
  json args = json::array();
  for (std::size_t i = 0; i < n; ++i) args.push_back({{"tensor", i}});
  return {{"args", args}, {"kwargs", json::object()}};
}

void log_env() {
  for (char** e = environ; e && *e; ++e) std::cerr << "test worker: env " << *e << "\n";
}

// "ok" or the errno's name, for the probe line.
std::string outcome(bool ok) { return ok ? std::string("ok") : std::string(::strerrorname_np(errno)); }

// The roles kilnd's socket at `path` gives this process (its HELLO reply's), as JSON; the
// errno's name when it cannot connect, "closed" when kilnd hangs up.
std::string kiln_roles(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return outcome(false);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::string e = outcome(false);
    ::close(fd);
    return e;
  }
  kiln::protocol::HelloRequest hello;
  hello.client = "test-worker";
  const auto frame = kiln::protocol::encode_frame({.type = kiln::protocol::MsgType::hello, .request_id = 1},
                                                  kiln::protocol::encode(hello));
  std::string got = "closed";
  if (::write(fd, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size())) {
    std::array<std::byte, kiln::protocol::kHeaderSize> head{};
    std::string body;
    if (::recv(fd, head.data(), head.size(), MSG_WAITALL) == static_cast<ssize_t>(head.size())) {
      auto h = kiln::protocol::decode_header(head, kiln::protocol::kHardMaxFrame);
      if (h) {
        body.resize(h->length);
        if (h->length == 0 || ::recv(fd, body.data(), body.size(), MSG_WAITALL) == static_cast<ssize_t>(body.size())) {
          json reply = json::parse(body, nullptr, false);
          got = reply.is_object() && reply.contains("roles") ? "roles:" + reply["roles"].dump() : "reply:" + body;
        }
      }
    }
  }
  ::close(fd);
  return got;
}

// What the sandbox let this process do (see the header comment).
std::string probe(const json& p) {
  std::string line = "uid=" + std::to_string(::getuid()) + " gid=" + std::to_string(::getgid());
  for (auto [name, family] : {std::pair{"inet", AF_INET}, std::pair{"inet6", AF_INET6}}) {
    int s = ::socket(family, SOCK_STREAM, 0);
    line += std::string(" ") + name + "=" + outcome(s >= 0);
    if (s >= 0) ::close(s);
  }
  for (const auto& path : p.value("write", json::array())) {
    const std::string f = path.get<std::string>();
    int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    line += " write:" + f + "=" + outcome(fd >= 0);
    if (fd >= 0) ::close(fd);
  }
  if (p.contains("kiln_socket")) line += " kiln_socket=" + kiln_roles(p["kiln_socket"].get<std::string>());
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string in_tmp = std::string(tmpdir ? tmpdir : "/tmp") + "/test-worker-probe";
  int t = ::open(in_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  line += " tmp=" + outcome(t >= 0);
  if (t >= 0) ::close(t);
  return line;
}

// A file in this build's folder (the output's), written whole.
void write_in_build_folder(const std::string& output, const std::string& name, const std::string& text) {
  std::ofstream(std::filesystem::path(output).parent_path() / name) << text;
}

// A source's program: the text before its example inputs (see the header comment).
std::string program_of(const std::string& text) { return text.substr(0, text.find("\n#example-inputs ")); }

int build(const json& req) {
  std::string source_text = read_file(req.value("source", ""));
  json cmd = json::parse(program_of(source_text), nullptr, false);
  if (cmd.is_discarded()) return fail("source is not a test-worker JSON command");
  log_env();
  const json key = req.value("key", json::object());
  // The source is never trusted to match the hash it was registered under.
  const std::string own_hash = kiln::sha256(program_of(source_text)).hex();
  if (key.value("model_hash", std::string()) != own_hash)
    return fail("the source registered under model hash " + key.value("model_hash", std::string()) + " hashes to " +
                own_hash + " on this node; refusing to build from it");
  const std::size_t n_inputs = key.contains("inputs") && key["inputs"].is_array() ? key["inputs"].size() : 0;
  const json want_call = key.contains("call") && !key["call"].is_null() ? key["call"] : positional_call(n_inputs);
  if (cmd.contains("call") && cmd["call"] != want_call)
    return fail("key.call is " + want_call.dump() + " but the source was exported with the call " + cmd["call"].dump());
  const std::string behavior = cmd.value("behavior", "ok");
  const std::string region = req.contains("key") ? req["key"].value("region", "") : "";
  const std::string started = region + " " + std::to_string(::getpid()) + " " + req.value("output", "");
  write_in_build_folder(req.value("output", ""), "test-worker.started", started + "\n");
  std::cerr << "test worker: started " << started << "\n";
  if (cmd.contains("probe")) std::cerr << "test worker: probe " << probe(cmd["probe"]) << "\n";
  std::cerr << "test worker: building " << region << " (" << behavior << ")\n";
  if (cmd.contains("log")) std::cerr << cmd["log"].get<std::string>() << "\n";
  std::cerr << std::flush;
  if (int ms = cmd.value("sleep_ms", 0); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  if (cmd.contains("holds") && cmd["holds"].is_array()) {
    for (const auto& h : cmd["holds"]) {
      const std::string file = h.value("file", "");
      if (file.empty() || req.value("output", "").find(h.value("only", "")) == std::string::npos) continue;
      while (::access(file.c_str(), F_OK) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const std::string output = req.value("output", "");
  std::string content = "artifact of " + req.value("key_digest", std::string("?")) + " built by pid " + std::to_string(::getpid());
  // "content_file": the artifact is that file's bytes instead (e.g. a package with AOTI
  // metadata, which kilnd checks against the key).
  if (std::string f = cmd.value("content_file", std::string()); !f.empty()) content = read_file(f);
  // "pad_bytes": N makes the artifact N bytes longer (pseudo-random, so zstd cannot shrink
  // it away), for benchmarks of artifact sizes.
  if (std::uint64_t pad = cmd.value("pad_bytes", std::uint64_t{0}); pad > 0) {
    std::uint64_t x = 0x9e3779b97f4a7c15ull ^ pad;
    content.reserve(content.size() + pad);
    for (std::uint64_t i = 0; i < pad; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      content.push_back(static_cast<char>(x));
    }
  }
  auto write_artifact = [&] {
    std::ofstream(output, std::ios::binary) << content;
  };
  json ok = {{"protocol", 1},
             {"ok", true},
             {"artifact", {{"path", output}, {"size", content.size()}, {"sha256", kiln::sha256(content).hex()}}},
             {"compile_seconds", 0.01}};

  if (behavior == "ok") {
    write_artifact();
    return answer(ok);
  }
  if (behavior == "ok_then_exit_1") {
    write_artifact();
    answer(ok);
    return 1;
  }
  if (behavior == "fail") return fail("test worker failed on purpose");
  if (behavior == "crash") {
    std::cerr << "test worker: about to crash\n" << std::flush;
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
    return 99;
  }
  if (behavior == "hang") {
    ::signal(SIGTERM, SIG_IGN);  // only SIGKILL stops it
    sleep_forever();
  }
  if (behavior == "hang_child") {
    pid_t child = ::fork();
    if (child == 0) sleep_forever();
    write_in_build_folder(req.value("output", ""), "child.pid", std::to_string(child) + "\n");
    std::cerr << "test worker: child " << child << "\n" << std::flush;
    sleep_forever();
  }
  if (behavior == "garbage") {
    std::cout << "this is not json \x01\x02\n" << std::flush;
    return 0;
  }
  if (behavior == "two_lines") {
    std::cout << "progress 50%\n" << ok.dump() << "\n" << std::flush;
    return 0;
  }
  if (behavior == "nothing") return 0;
  if (behavior == "no_file") return answer(ok);
  if (behavior == "wrong_digest") {
    write_artifact();
    ok["artifact"]["sha256"] = kiln::sha256(std::string("something else")).hex();
    return answer(ok);
  }
  if (behavior == "flood") {
    std::string line(1 << 16, 'x');
    for (int i = 0; i < 64; ++i) std::cout << line;
    std::cout << std::flush;
    return 0;
  }
  return fail("unknown behavior " + behavior);
}

}  // namespace

int main() {
  std::stringstream ss;
  ss << std::cin.rdbuf();
  json req = json::parse(ss.str(), nullptr, false);
  if (req.is_discarded() || !req.is_object()) return fail("request is not JSON");
  const std::string op = req.value("op", "");
  if (op == "toolchain") {
    // A probe that takes as long as a test wants: while the file named here exists.
    if (const char* gate = std::getenv("KILN_TEST_WORKER_TOOLCHAIN_GATE"))
      while (::access(gate, F_OK) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const char* mode = std::getenv("KILN_TEST_WORKER_TOOLCHAIN");
    // As the Python worker answers on a node whose python has no torch.
    if (mode && std::string(mode) == "fail")
      return fail("ModuleNotFoundError: No module named 'torch' (KILN_TEST_WORKER_TOOLCHAIN=fail)");
    json toolchain = {{"torch_version", "test-torch"}, {"torch_git", "test-git"}, {"cuda_version", "test-cuda"},
                      {"triton_version", "test-triton"}, {"platform", "linux"}, {"machine", "x86_64"}};
    // As the Python worker: with "host" (the default), also the CPU ISA its torch records.
    if (req.value("host", true)) toolchain["cpu_isa"] = "test-worker-isa";
    return answer({{"protocol", 1}, {"ok", true}, {"toolchain", toolchain}, {"gpus", json::array()}});
  }
  if (op == "hash") {
    const std::string text = read_file(req.value("source", ""));
    json cmd = json::parse(program_of(text), nullptr, false);
    if (!cmd.is_object()) cmd = json::object();
    if (int ms = cmd.value("hash_sleep_ms", 0); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    if (cmd.value("hash_fail", false)) return fail("not a torch.export archive (hash_fail)");
    json inputs = cmd.value("inputs", json::array());
    return answer({{"protocol", 1},
                   {"ok", true},
                   {"model_hash", kiln::sha256(program_of(text)).hex()},
                   {"dtype", "bfloat16"},
                   {"inputs", inputs},
                   {"call", cmd.value("call", positional_call(inputs.size()))}});
  }
  if (op == "strip") {  // a test-worker source has no weights: the copy is the same bytes
    const std::string text = read_file(req.value("source", ""));
    std::ofstream(req.value("output", ""), std::ios::binary) << text;
    return answer(
        {{"protocol", 1}, {"ok", true}, {"model_hash", kiln::sha256(program_of(text)).hex()}, {"weight_free", true}});
  }
  if (op == "build") return build(req);
  return fail("unknown op " + op);
}
