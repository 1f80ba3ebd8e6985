// xxh64 (kernels/xxhash64.h) against the published test vectors of the reference XXH64: the
// empty input, inputs shorter than a word, whole words, and a 32-byte stripe plus a tail.
#include <cstring>
#include <utility>

#include "kernels/xxhash64.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("xxh64: the published test vectors") {
  const std::pair<const char*, uint64_t> vectors[] = {
      {"", 0xEF46DB3751D8E999ULL},
      {"a", 0xD24EC4F1A98C6E5BULL},
      {"abc", 0x44BC2CF5AD770999ULL},
      {"Call me Ishmael.", 0x6D04390FC9D61A90ULL},                          // whole words
      {"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1ULL}};  // stripes + tail
  for (const auto& [text, want] : vectors) {
    INFO("'" << text << "'");
    REQUIRE(xxh64(text, std::strlen(text)) == want);
  }
}
