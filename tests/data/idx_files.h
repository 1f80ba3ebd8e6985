// defines: write_idx(), which writes an IDX file (gzip-compressed or plain) for tests that need
// small or deliberately broken data sets.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

namespace cutrain_test {

// magic, then each size big-endian, then data.
inline void write_idx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& sizes,
                      const std::vector<uint8_t>& data, bool gzip) {
  std::vector<uint8_t> bytes;
  auto put32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(uint8_t(v >> s));
  };
  put32(magic);
  for (uint32_t s : sizes) put32(s);
  bytes.insert(bytes.end(), data.begin(), data.end());
  if (!gzip) return write_bytes(path, bytes);
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

}  // namespace cutrain_test
