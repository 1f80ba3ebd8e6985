// The fuzz targets' feeds (fuzz/feed.h) in the ordinary test build, no clang needed: every
// reproducer kept in fuzz/regressions/<target>/ must end in success or a clean cutrain::Error
// (so a fixed finding stays fixed), and every seed of the corpus must be accepted or refused
// as it was made (so a feed that stopped reaching its parser, refusing everything, shows).
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "fuzz/corpus.h"
#include "fuzz/feed.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain_fuzz;
namespace fs = std::filesystem;

namespace {

using Feed = Outcome (*)(const uint8_t*, size_t);

const std::map<std::string, Feed>& feeds() {
  static const std::map<std::string, Feed> m = {
      {"image_list", feed_image_list}, {"csv_list", feed_csv_list},
      {"image_decode", feed_image_decode},
      {"pack", feed_pack},             {"checkpoint", feed_checkpoint},
      {"checkpoint_config", feed_checkpoint_config},
      {"model_spec", feed_model_spec}, {"idx", feed_idx}};
  return m;
}

Outcome feed_file(const std::string& target, const std::string& path) {
  const std::vector<uint8_t> bytes = cutrain_test::read_bytes(path);
  return feeds().at(target)(bytes.data(), bytes.size());
}

}  // namespace

TEST_CASE("fuzz: every kept reproducer ends in success or a clean cutrain::Error") {
  const fs::path root = cutrain_test::repo_root() / "fuzz" / "regressions";
  REQUIRE(fs::is_directory(root));
  int files = 0;
  for (const fs::directory_entry& dir : fs::directory_iterator(root)) {
    const std::string target = dir.path().filename().string();
    INFO("fuzz/regressions/" << target << ": no such fuzz target");
    REQUIRE(feeds().count(target) == 1);
    for (const fs::directory_entry& f : fs::directory_iterator(dir.path())) {
      INFO("the reproducer " << f.path().string() << " (replay it with build/fuzz/bin/"
                             << target << "_fuzz after make fuzz)");
      (void)feed_file(target, f.path().string());  // any other exception fails the test
      files++;
    }
  }
  MESSAGE(files << " reproducers replayed");
  REQUIRE(files > 0);
}

TEST_CASE("fuzz: every seed of the corpus is accepted or refused as it was made") {
  cutrain_test::TempDir t(cutrain_test::TempDir::memory_if_possible);
  const std::vector<Seed> seeds = write_seed_corpus(t.str());
  std::map<std::string, int> accepted;
  for (const Seed& s : seeds) {
    INFO(s.target << ": " << s.path << " should be " << (s.good ? "accepted" : "refused"));
    REQUIRE(feeds().count(s.target) == 1);
    REQUIRE((feed_file(s.target, s.path) == Outcome::accepted) == s.good);
    accepted[s.target] += s.good;
  }
  for (const auto& [target, feed] : feeds()) {
    INFO(target << " has a seed it accepts");
    REQUIRE(accepted[target] > 0);
  }
}

TEST_CASE("fuzz: a refusal whose message is not printable is a finding") {
  auto refuse = [](const std::string& message) {
    return refuse_errors([&] { throw cutrain::UserError(message); });
  };
  REQUIRE(refuse("list.txt: 2 malformed lines:\n  list.txt:1: x\n  list.txt:2: \\x1b") ==
          Outcome::refused);
  for (const std::string bad : {"name '\x1b[2J'", "a\rb", "\x92omentum", "rtl \u202e",
                                "forged\nline"})
    REQUIRE_THROWS_AS(refuse(bad), std::logic_error);
  // The feeds' parsers quote what they read printable: names with every kind of byte refused.
  for (const std::string name : {"\x1b]0;owned\x07\x1b[2J", "ok\rforged", "caf\xe9",
                                 "photo\u202egpj.exe", "back\bspace"}) {
    INFO(cutrain::printable(name));
    const std::string list = "a.jpg\t" + name + "\nb.jpg\tcat" + std::string(1, '\0') + "cat\n";
    REQUIRE(feed_image_list(reinterpret_cast<const uint8_t*>(list.data()), list.size()) ==
            Outcome::refused);
    const std::string csv = "path,label\na.jpg," + name + "\n" + std::string(1, '\0') + "cat\n";
    REQUIRE(feed_csv_list(reinterpret_cast<const uint8_t*>(csv.data()), csv.size()) ==
            Outcome::refused);
    const std::string spec = "conv 8 3x3\n" + name + " 3x3\n";
    REQUIRE(feed_model_spec(reinterpret_cast<const uint8_t*>(spec.data()), spec.size()) ==
            Outcome::refused);
  }
}
