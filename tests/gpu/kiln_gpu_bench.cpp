// kiln_gpu_bench: the C++ side of kiln's GPU proof (tests/gpu/run.sh), using libkiln and
// the libtorch helper (kiln_torch). Subcommands, each printing one JSON object:
//   register --hash H --name N FILE       register a source (PUT_SOURCE)
//   race --key K --clients N              N clients, one connection each, ask at once for a
//                                         missing artifact (get; on a miss BUILD and get)
//   load --key K --weights W --ref R      key -> runnable block via kiln::torch::load_block
//        [--iters N] [--device cpu]       (a hit), check against eager's outputs, time steps;
//                                         --device cpu: a CPU block's package (CI runs this)
//   fetch --key K --out FILE              write an artifact's bytes (for the Python client)
//   logs --key K                          the key's last build record (LOGS)
// K is a key JSON file (node fields may be empty: kilnd fills them). W and R are tensor
// files written by prepare.py: <prefix>.json (names, dtypes, shapes, offsets) + <prefix>.bin.
#include <cuda_runtime_api.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kiln/client/client.hpp"
#include "kiln/torch/block.hpp"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void die(const std::string& what) {
  std::cerr << "kiln_gpu_bench: " << what << "\n";
  std::exit(1);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

kiln::Key load_key(const std::string& path) {
  auto k = kiln::Key::from_json(slurp(path));
  if (!k) die(path + ": " + k.error().to_string());
  return *k;
}

kiln::client::Client connect() {
  auto c = kiln::client::Client::connect();
  if (!c) die(c.error().to_string());
  return std::move(*c);
}

at::ScalarType scalar_type(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float32") return at::kFloat;
  if (name == "int64") return at::kLong;
  die("unsupported dtype " + name);
}

// Tensors of a prepare.py tensor file, in file order, on `device`.
std::vector<std::pair<std::string, at::Tensor>> load_tensors(const std::string& prefix, at::Device device) {
  json manifest = json::parse(slurp(prefix + ".json"));
  std::string data = slurp(prefix + ".bin");
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& t : manifest["tensors"]) {
    std::vector<int64_t> shape = t["shape"].get<std::vector<int64_t>>();
    auto offset = t["offset"].get<std::size_t>();
    auto cpu = at::from_blob(data.data() + offset, shape, at::TensorOptions().dtype(scalar_type(t["dtype"])));
    out.emplace_back(t["name"].get<std::string>(), cpu.to(device).contiguous().clone());
  }
  return out;
}

std::string arg(const std::map<std::string, std::string>& a, const std::string& name) {
  auto it = a.find(name);
  if (it == a.end()) die("missing --" + name);
  return it->second;
}

int cmd_register(const std::map<std::string, std::string>& a, const std::string& file) {
  auto c = connect();
  auto t = Clock::now();
  auto s = c.put_source(arg(a, "hash"), arg(a, "name"), file);
  if (!s) die(s.error().to_string());
  std::cout << json{{"model_hash", s->model_hash}, {"size", s->size}, {"seconds", since(t)}}.dump() << std::endl;
  return 0;
}

int cmd_race(const std::map<std::string, std::string>& a) {
  const kiln::Key key = load_key(arg(a, "key"));
  const int clients = std::stoi(arg(a, "clients"));
  std::vector<json> results(static_cast<std::size_t>(clients));
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      json& r = results[static_cast<std::size_t>(i)];
      auto c = kiln::client::Client::connect();
      if (!c) {
        r = {{"error", c.error().to_string()}};
        return;
      }
      auto t = Clock::now();
      auto got = c->get(key);
      bool miss = got && !*got;
      if (miss) {
        auto b = c->call(kiln::protocol::MsgType::build, "{\"key\":" + key.to_json() + ",\"wait\":true}");
        if (!b) {
          r = {{"error", b.error().to_string()}};
          return;
        }
        got = c->get(key);
      }
      if (!got || !*got) {
        r = {{"error", got ? std::string("no artifact after the build") : got.error().to_string()}};
        return;
      }
      r = {{"seconds", since(t)}, {"miss", miss}, {"size", (*got)->size()}, {"blob", (*got)->info().blob_digest.hex()},
           {"build_seconds", (*got)->info().build_seconds}};
    });
  }
  for (auto& t : threads) t.join();
  std::cout << json{{"clients", clients}, {"wall_seconds", since(t0)}, {"results", results}}.dump() << std::endl;
  return 0;
}

int cmd_load(const std::map<std::string, std::string>& a) {
  const kiln::Key key = load_key(arg(a, "key"));
  const int iters = a.count("iters") ? std::stoi(a.at("iters")) : 100;
  const bool cpu = a.count("device") && a.at("device") == "cpu";
  const at::Device device = cpu ? at::Device(at::kCPU) : at::Device(at::kCUDA);
  auto sync = [cpu] {
    if (!cpu) cudaDeviceSynchronize();
  };
  // The weights are the caller's: on the GPU before anything is asked of kiln (this also
  // initializes CUDA, as in any process that is about to run a model).
  std::unordered_map<std::string, at::Tensor> weights;
  for (auto& [n, t] : load_tensors(arg(a, "weights"), device)) weights.emplace(n, t);
  auto ref = load_tensors(arg(a, "ref"), device);
  std::vector<at::Tensor> inputs, expected;
  for (auto& [n, t] : ref) (n.rfind("input", 0) == 0 ? inputs : expected).push_back(t);
  sync();

  auto c = connect();
  const auto t0 = Clock::now();
  auto block = kiln::torch::load_block(c, key, weights);
  const double to_runnable = since(t0);
  if (!block) die(block.error().to_string());
  auto t1 = Clock::now();
  auto out = block->run(inputs);
  sync();
  const double first_run = since(t1);
  if (!out) die(out.error().to_string());
  if (out->size() != expected.size()) die("output count differs from eager's");
  double worst = 0;
  for (std::size_t i = 0; i < out->size(); ++i) {
    auto o = (*out)[i].to(at::kFloat), r = expected[i].to(at::kFloat);
    double rel = ((o - r).norm() / r.norm().clamp_min(1e-12)).item<double>();
    worst = std::max(worst, rel);
  }
  for (int i = 0; i < 10; ++i) (void)block->run(inputs);
  sync();
  auto t2 = Clock::now();
  for (int i = 0; i < iters; ++i) (void)block->run(inputs);
  sync();
  const double step_ms = since(t2) / iters * 1e3;
  const auto& tm = block->timings();
  std::cout << json{{"request_to_runnable_ms", to_runnable * 1e3}, {"built", tm.built}, {"get_ms", tm.get_s * 1e3},
                    {"load_ms", tm.load_s * 1e3}, {"attach_ms", tm.attach_s * 1e3}, {"first_run_ms", first_run * 1e3},
                    {"step_ms", step_ms}, {"rel_err_vs_eager", worst}, {"within_bf16_tolerance", worst <= 2e-2},
                    {"artifact_bytes", block->info().size}, {"constants", weights.size()}}
                   .dump()
            << std::endl;
  return worst <= 2e-2 ? 0 : 3;
}

int cmd_fetch(const std::map<std::string, std::string>& a) {
  auto c = connect();
  auto t = Clock::now();
  auto got = c.get(load_key(arg(a, "key")));
  if (!got) die(got.error().to_string());
  if (!*got) die("no artifact for this key");
  auto bytes = (*got)->read_all();
  if (!bytes) die(bytes.error().to_string());
  std::ofstream(arg(a, "out"), std::ios::binary).write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
  std::cout << json{{"bytes", bytes->size()}, {"seconds", since(t)}}.dump() << std::endl;
  return 0;
}

int cmd_logs(const std::map<std::string, std::string>& a) {
  auto c = connect();
  auto d = load_key(arg(a, "key"));
  auto info = c.stat(d);
  if (!info || !*info) die("no artifact for this key");
  auto r = c.call(kiln::protocol::MsgType::logs, "{\"key_digest\":\"" + (*info)->key_digest.hex() + "\"}");
  if (!r) die(r.error().to_string());
  std::cout << *r << std::endl;
  return 0;
}

// Every build kilnd knows (BUILD_STATUS), as JSON.
int cmd_builds() {
  auto c = connect();
  auto r = c.call(kiln::protocol::MsgType::build_status, "{}");
  if (!r) die(r.error().to_string());
  std::cout << *r << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: kiln_gpu_bench register|race|load|fetch|logs|builds [--name value ...] [FILE]");
  std::string cmd = argv[1];
  std::map<std::string, std::string> a;
  std::string positional;
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0 && i + 1 < argc) a[s.substr(2)] = argv[++i];
    else positional = s;
  }
  if (cmd == "register") return cmd_register(a, positional);
  if (cmd == "race") return cmd_race(a);
  if (cmd == "load") return cmd_load(a);
  if (cmd == "fetch") return cmd_fetch(a);
  if (cmd == "logs") return cmd_logs(a);
  if (cmd == "builds") return cmd_builds();
  die("unknown subcommand " + cmd);
}
