#include "data/fingerprint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "kernels/check.h"

namespace cutrain {

namespace {

constexpr int64_t kMaxBlocks = 256;
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;

// FNV-1a over a sample: its name, a 0 byte (names hold none, so ("ab", 1) and ("a", ...) cannot
// run together) and its label's 4 bytes, little-endian. As image_list_hash does for a list.
void eat_sample(uint64_t& h, const std::string& name, int32_t label) {
  auto eat = [&h](unsigned char byte) { h = (h ^ byte) * kFnvPrime; };
  for (char c : name) eat((unsigned char)c);
  eat(0);
  for (int b = 0; b < 4; b++) eat((unsigned char)(uint32_t(label) >> (8 * b)));
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

}  // namespace

DataFingerprint fingerprint_of(const SampleSource& source) {
  DataFingerprint f;
  f.count = source.size();
  // A power of two: two counts within a factor of two mostly get the same block, so their
  // blocks can be compared.
  while (f.block * kMaxBlocks < f.count) f.block *= 2;
  f.hash = kFnvBasis;
  for (int64_t i = 0; i < f.count; i++) {
    const std::string name = source.name(i);
    if (i % f.block == 0) {
      f.block_hashes.push_back(kFnvBasis);
      f.block_first.push_back(name);
    }
    eat_sample(f.hash, name, source.label(i));
    eat_sample(f.block_hashes.back(), name, source.label(i));
  }
  return f;
}

std::string DataFingerprint::to_json() const {
  nlohmann::ordered_json j;
  j["count"] = count;
  j["hash"] = hex(hash);
  j["block"] = block;
  nlohmann::json hashes = nlohmann::json::array();
  for (uint64_t h : block_hashes) hashes.push_back(hex(h));
  j["block_hashes"] = hashes;
  j["block_first"] = block_first;
  // A name that is not UTF-8 (a Latin-1 file name) is shown with U+FFFD in its place; the
  // hashes are of the raw bytes, so nothing is lost for the comparison.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

DataFingerprint DataFingerprint::from_json(const std::string& text, const std::string& where) {
  DataFingerprint f;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    f.count = j.at("count").get<int64_t>();
    f.hash = std::stoull(j.at("hash").get<std::string>(), nullptr, 16);
    f.block = j.at("block").get<int64_t>();
    for (const auto& h : j.at("block_hashes"))
      f.block_hashes.push_back(std::stoull(h.get<std::string>(), nullptr, 16));
    f.block_first = j.at("block_first").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    USER_CHECK(false, where << ": the data fingerprint is unreadable: " << e.what());
  }
  USER_CHECK(f.count >= 0 && f.block >= 1 && f.block_hashes.size() == f.block_first.size(),
             where << ": the data fingerprint is inconsistent");
  return f;
}

std::string data_difference(const DataFingerprint& was, const DataFingerprint& now) {
  if (was == now) return "";
  std::string out;
  if (was.count != now.count)
    out = std::to_string(was.count) + " samples then, " + std::to_string(now.count) + " now";
  // The first block that differs, compared where both have the same blocks.
  if (was.block == now.block) {
    const size_t n = std::min(was.block_hashes.size(), now.block_hashes.size());
    // b == n: all the blocks both have are equal; the difference is where one goes on.
    for (size_t b = 0; b <= n; b++) {
      if (b == n && was.block_hashes.size() == now.block_hashes.size()) break;
      if (b < n && was.block_hashes[b] == now.block_hashes[b]) continue;
      const int64_t first = int64_t(b) * was.block;
      const int64_t last = std::min(std::max(was.count, now.count), first + was.block) - 1;
      out += std::string(out.empty() ? "" : "; ") + "the first difference is in sample" +
             (first == last ? " " + std::to_string(first)
                            : "s " + std::to_string(first) + "-" + std::to_string(last));
      if (b < n && was.block_first[b] != now.block_first[b])
        out += ": sample " + std::to_string(first) + " was '" + was.block_first[b] +
               "', now '" + now.block_first[b] + "'";
      break;
    }
  }
  if (out.empty()) out = "the samples' names or labels differ";
  return out;
}

}  // namespace cutrain
