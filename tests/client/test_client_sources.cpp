// libkiln's source calls against a real kilnd: list_sources (prefix, pages), get_source
// (descriptor and stream, byte-identical), a missing or damaged source, bad input refused
// before anything is sent, the read role; and STATUS's GPUs and build slots.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "client_test.hpp"
#include "kiln/client/json.hpp"
#include "kiln/digest.hpp"

namespace {

Client connect(const KilndProcess& d, Transfer transfer = Transfer::descriptor) {
  return test::connect_client(d.socket(), transfer);
}

std::string archive_bytes(std::size_t n, char seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + static_cast<char>(i * 7 + i / 251));
  return s;
}

std::filesystem::path write(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string out;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) out.append(buf, static_cast<std::size_t>(in.gcount()));
  return out;
}

std::string as_string(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A hash that sorts where we want it: `lead` hex chars, then zeros.
std::string hash_with(const std::string& lead) { return lead + std::string(64 - lead.size(), '0'); }

}  // namespace

TEST_CASE("SourcesAreListedInHashOrderByPrefixAndPageAndFetchedByteIdentical") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  Client streaming = connect(d, Transfer::stream);

  const std::string a = archive_bytes(300000, 'a'), b = archive_bytes(5, 'b'), e = "";
  const std::string ha = hash_with("ab01"), hb = hash_with("ab02"), he = hash_with("cd");
  REQUIRE(c.put_source(hb, "b.pt2", write(dir.path() / "b.pt2", b)));
  REQUIRE(c.put_source(ha, "a.pt2", write(dir.path() / "a.pt2", a)));
  REQUIRE(c.put_source(he, "empty.pt2", write(dir.path() / "empty.pt2", e)));

  auto all = c.list_sources();
  REQUIRE_MESSAGE(all, all.error().to_string());
  REQUIRE(all->sources.size() == 3);
  CHECK_FALSE(all->next_offset);
  CHECK(all->sources[0].model_hash == ha);  // ordered by model hash
  CHECK(all->sources[1].model_hash == hb);
  CHECK(all->sources[2].model_hash == he);
  CHECK(all->sources[0].size == a.size());
  CHECK(all->sources[0].name == "a.pt2");
  CHECK(all->sources[0].blob_digest == sha256(a));
  CHECK(all->sources[0].stored_size > 0);
  CHECK(all->sources[0].stored_size < a.size());  // zstd on a repetitive archive
  CHECK(all->sources[0].created_at > 0);

  auto page1 = c.list_sources({"ab", 1, 0});
  REQUIRE(page1);
  REQUIRE(page1->sources.size() == 1);
  CHECK(page1->sources[0].model_hash == ha);
  REQUIRE(page1->next_offset == 1u);
  auto page2 = c.list_sources({"ab", 1, *page1->next_offset});
  REQUIRE(page2);
  REQUIRE(page2->sources.size() == 1);
  CHECK(page2->sources[0].model_hash == hb);
  CHECK_FALSE(page2->next_offset);
  auto none = c.list_sources({"ff", 1000, 0});
  REQUIRE(none);
  CHECK(none->sources.empty());

  for (Client* cl : {&c, &streaming}) {
    auto got = cl->get_source(ha);
    REQUIRE_MESSAGE(got, got.error().to_string());
    CHECK(got->info().model_hash == ha);
    CHECK(got->info().blob_digest == sha256(a));
    CHECK(got->size() == a.size());
    auto bytes = got->read_all();
    REQUIRE(bytes);
    CHECK(as_string(*bytes) == a);
    CHECK(slurp(got->path()) == a);
    // Sealed like a GET hit's copy: the bytes cannot change under the reader.
    int seals = ::fcntl(got->fd(), F_GET_SEALS);
    CHECK((seals & F_SEAL_WRITE) != 0);
    CHECK((seals & F_SEAL_SHRINK) != 0);
    auto empty = cl->get_source(he);
    REQUIRE_MESSAGE(empty, empty.error().to_string());
    CHECK(empty->size() == 0);
  }
  // write_to: the same bytes into a file.
  auto got = c.get_source(hb);
  REQUIRE(got);
  auto out = dir.path() / "out.pt2";
  int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  CHECK(got->write_to(fd));
  ::close(fd);
  CHECK(slurp(out) == b);
  CHECK(client::to_json(got->info()).find("\"model_hash\":\"" + hb + "\"") != std::string::npos);
}

TEST_CASE("AMissingSourceIsNotFoundNamingTheHashAndBadInputIsRefusedBeforeSending") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  const std::string h = hash_with("77");
  auto missing = c.get_source(h);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);
  CHECK(missing.error().message.find(h) != std::string::npos);
  CHECK(missing.error().message.find("kilnctl source add") != std::string::npos);

  auto bad = c.get_source("ABC");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::invalid_argument);
  CHECK(bad.error().message.find("64 lowercase hex") != std::string::npos);
  auto bad_prefix = c.list_sources({"XY", 10, 0});
  REQUIRE_FALSE(bad_prefix);
  CHECK(bad_prefix.error().code == Errc::invalid_argument);
  auto too_many = c.list_sources({"", 20000, 0});
  REQUIRE_FALSE(too_many);
  CHECK(too_many.error().code == Errc::invalid_argument);
  CHECK(too_many.error().message.find("10000") != std::string::npos);
  // The connection is still good after each refusal.
  auto list = c.list_sources();
  REQUIRE(list);
  CHECK(list->sources.empty());
}

TEST_CASE("ADamagedSourceIsCorruptNeverServedAndLeavesTheListing") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  const std::string bytes = archive_bytes(200000, 'z');
  const std::string h = hash_with("ee");
  auto info = c.put_source(h, "z.pt2", write(dir.path() / "z.pt2", bytes));
  REQUIRE(info);
  auto blob = dir.path() / "store" / "blobs" / info->blob_digest.hex().substr(0, 2) / (info->blob_digest.hex() + ".blob");
  REQUIRE(std::filesystem::exists(blob));
  {
    // Flip bytes in the payload, keeping the file's size (the header stays valid).
    std::fstream f(blob, std::ios::in | std::ios::out | std::ios::binary);
    auto size = std::filesystem::file_size(blob);
    f.seekp(static_cast<std::streamoff>(size - 100));
    f.write("garbage-garbage-garbage", 23);
  }
  auto got = c.get_source(h);
  REQUIRE_FALSE(got);
  CHECK(got.error().code == Errc::corrupt);
  auto list = c.list_sources();
  REQUIRE(list);
  CHECK(list->sources.empty());
  CHECK(c.get_source(h).error().code == Errc::not_found);
}

TEST_CASE("ListingAndFetchingSourcesNeedTheReadRole") {
  TempDir dir;
  const std::string uid = std::to_string(::getuid());
  const std::string h = hash_with("aa");
  std::filesystem::create_directories(dir.path() / "none");
  // build_groups = []: the test's group is the socket's, which builds by default.
  KilndProcess nobody(dir.path() / "none", "[access]\ntrust_owner = false\nread_users = []\nbuild_groups = []\n");
  REQUIRE_MESSAGE(nobody.start(), nobody.log());
  Client n = connect(nobody);
  auto refused = n.list_sources();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::permission_denied);
  CHECK(refused.error().message.find("read") != std::string::npos);
  CHECK(n.get_source(h).error().code == Errc::permission_denied);

  std::filesystem::create_directories(dir.path() / "reader");
  KilndProcess reader(dir.path() / "reader",
                      "[access]\ntrust_owner = false\nread_users = [\"" + uid + "\"]\nbuild_groups = []\n");
  REQUIRE_MESSAGE(reader.start(), reader.log());
  Client r = connect(reader);
  auto listed = r.list_sources();
  REQUIRE_MESSAGE(listed, listed.error().to_string());
  CHECK(listed->sources.empty());
  CHECK(r.get_source(h).error().code == Errc::not_found);
  // Registering needs build: refused for a reader.
  auto put = r.put_source(h, "x", write(dir.path() / "x.pt2", "x"));
  REQUIRE_FALSE(put);
  CHECK(put.error().code == Errc::permission_denied);
}

TEST_CASE("StatusListsBuildSlotsAndSaysWhyThereIsNoGpu") {
  TempDir dir;
  SUBCASE("builds disabled: no GPU, the note says GPUs are not probed") {
    KilndProcess d(dir.path(), "[builds]\nenabled = false\n");
    REQUIRE_MESSAGE(d.start(), d.log());
    Client c = connect(d);
    auto s = c.status();
    REQUIRE_MESSAGE(s, s.error().to_string());
    CHECK(s->gpus.empty());
    CHECK(s->build_slots.empty());
    CHECK(s->gpu_note.find("builds are disabled") != std::string::npos);
    auto j = client::to_json(*s);
    CHECK(j.find("\"gpus\":[]") != std::string::npos);
    CHECK(j.find("\"gpu_note\":\"builds are disabled") != std::string::npos);
  }
  SUBCASE("configured slots: each slot with its queue, and why no GPU is listed") {
    auto node = test::test_node_fields();
    KilndProcess d(dir.path(), "[builds]\nworker = [\"/bin/false\"]\nprobe_gpus = false\nprobe_timeout_s = 5\n"
                               "builds_per_gpu = 3\n[[builds.slots]]\nname = \"cpu0\"\ngpu_arch = \"" + node.gpu_arch +
                                   "\"\ngpu_name = \"" + node.gpu_name +
                                   "\"\n[[builds.slots]]\nname = \"cpu1\"\ngpu_arch = \"cpu\"\ngpu_name = \"x86_64\"\n");
    REQUIRE_MESSAGE(d.start(), d.log());
    Client c = connect(d);
    auto s = c.status();
    REQUIRE_MESSAGE(s, s.error().to_string());
    CHECK(s->gpus.empty());
    CHECK(s->gpu_note.find("GPU probe disabled") != std::string::npos);
    REQUIRE(s->build_slots.size() == 2);
    CHECK(s->build_slots[0].name == "cpu0");
    CHECK(s->build_slots[0].gpu_arch == node.gpu_arch);
    CHECK(s->build_slots[1].name == "cpu1");
    CHECK(s->build_slots[1].gpu_name == "x86_64");
    CHECK(s->build_slots[0].running == 0);
    CHECK(s->build_slots[0].queued == 0);
    CHECK(s->build_slots[0].builds_at_once == 3);  // kiln.torch's queue estimate counts them
    CHECK(s->build_slots[1].builds_at_once == 3);
  }
}
