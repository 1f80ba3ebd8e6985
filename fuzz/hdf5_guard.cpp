// libhdf5_heap_trap (fuzz/hdf5_guard.h). Layouts from the HDF5 file format specification
// (version 0-3 superblocks, global heap collections version 1).
#include "fuzz/hdf5_guard.h"

#include <cstring>
#include <iterator>
#include <map>
#include <set>

namespace cutrain_fuzz {

namespace {

constexpr size_t kHeader = 16;  // collection: "GCOL", version, 3 reserved, size (u64)
constexpr size_t kObject = 16;  // object: index (u16), references (u16), 4 reserved, size (u64)

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

// The superblock at byte 0 with 8-byte addresses and lengths, or what is wrong.
std::string superblock_problem(const uint8_t* b, size_t n) {
  if (n < 16 || std::memcmp(b, "\x89HDF\r\n\x1a\n", 8) != 0)
    return "no HDF5 superblock at the start of the file";
  const unsigned version = b[8];
  if (version > 3) return "superblock version " + std::to_string(version);
  const size_t at = version <= 1 ? 13 : 9;  // size of offsets, then size of lengths
  if (b[at] != 8 || b[at + 1] != 8)
    return "addresses of " + std::to_string(b[at]) + " and lengths of " +
           std::to_string(b[at + 1]) + " bytes (expected 8 and 8)";
  return "";
}

// The objects of the collection at byte g (index -> size), or what is wrong with it; the byte
// where each object's header starts goes into `headers`. The walk is libhdf5's
// (H5HG__cache_heap_deserialize), with the bounds it does not check.
std::string walk_collection(const uint8_t* b, size_t n, size_t g,
                            std::map<uint64_t, uint64_t>& objects, std::set<size_t>& headers) {
  const std::string at = "global heap collection at byte " + std::to_string(g) + ": ";
  if (n - g < kHeader) return at + "cut short";
  const uint64_t size = le(b + g + 8, 8);
  if (size < kHeader || size > n - g)
    return at + "size " + std::to_string(size) + " does not fit in the file";
  const size_t end = g + size_t(size);
  for (size_t p = g + kHeader; end - p >= kObject;) {
    const uint64_t idx = le(b + p, 2), bytes = le(b + p + 8, 8);
    // Index 0 is the free space: its size includes its header and is not padded.
    const uint64_t room = end - p;
    const uint64_t need = idx == 0 ? bytes : kObject + ((bytes + 7) & ~uint64_t(7));
    if (bytes > room || need < kObject || need > room)
      return at + "object " + std::to_string(idx) + " of " + std::to_string(bytes) +
             " bytes does not fit in the " + std::to_string(room) + " bytes left";
    if (idx != 0) objects[idx] = bytes;
    headers.insert(p);
    p += size_t(need);
  }
  return "";
}

}  // namespace

std::string libhdf5_heap_trap(const uint8_t* b, size_t n) {
  const std::string super = superblock_problem(b, n);
  if (!super.empty()) return super;
  // Every collection, by its signature and version.
  std::map<uint64_t, std::map<uint64_t, uint64_t>> collections;  // address -> its objects
  std::map<uint64_t, std::string> broken;
  std::set<size_t> headers;  // where the collections' object headers start
  for (size_t p = 0; n >= 5 && p <= n - 5; p++) {
    const void* hit = std::memchr(b + p, 'G', n - 4 - p);
    if (hit == nullptr) break;
    p = size_t(static_cast<const uint8_t*>(hit) - b);
    if (std::memcmp(b + p, "GCOL\x01", 5) != 0) continue;
    const std::string problem = walk_collection(b, n, p, collections[p], headers);
    if (!problem.empty()) broken[p] = problem;
  }
  if (collections.empty()) return "";
  // Every reference to one: [length u32][address u64][index u32]. (Most 8-byte values lie
  // outside the range of the addresses: one comparison each.)
  const uint64_t lo = collections.begin()->first, hi = collections.rbegin()->first;
  for (size_t q = 4; n >= 12 && q <= n - 12; q++) {
    const uint64_t address = le(b + q, 8);
    if (address < lo || address > hi) continue;
    auto c = collections.find(address);
    if (c == collections.end()) continue;
    // Inside an object's header it is no reference: the free space's size can equal its
    // collection's address (a collection of 4096 bytes at byte A whose free space starts at
    // byte 4096 has A bytes of it), with a 0 index and 0 reserved bytes around it.
    const auto h = headers.upper_bound(q - 4);
    if (h != headers.begin() && q - 4 < *std::prev(h) + kObject) continue;
    if (broken.count(address)) return broken[address];
    const uint64_t length = le(b + q - 4, 4), idx = le(b + q + 8, 4);
    auto o = c->second.find(idx);
    const std::string at = "a string at byte " + std::to_string(q - 4) + " ";
    if (o == c->second.end())
      return at + "refers to object " + std::to_string(idx) + ", which is not in the global heap";
    if (o->second != length)
      return at + "of length " + std::to_string(length) + " refers to a global heap object of " +
             std::to_string(o->second) + " bytes";
  }
  return "";
}

}  // namespace cutrain_fuzz
