// defines: what the checkpoint tests share: tensor_from_bytes (a tensor whose bytes are a
// recognisable text), small_checkpoint (a checkpoint of a given step), require_identical (two
// checkpoints equal bit for bit), flip_byte_in (damage a file where a pattern lies) and
// files_in (a folder's file names).
#pragma once
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "train/checkpoint/checkpoint.h"

namespace cutrain_test {

// A tensor of `shape` and `dtype` whose bytes are `text` repeated (cut to fit), so its data
// can be found in the file.
inline cutrain::Tensor tensor_from_bytes(const cutrain::Shape& shape, cutrain::DType dtype,
                                         const std::string& text) {
  cutrain::Tensor t = cutrain::Tensor::empty(shape, dtype);
  uint8_t* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.bytes(); i++) p[i] = uint8_t(text[i % text.size()]);
  return t;
}

// Step `step`'s checkpoint: a weight that depends on the step, a pattern tensor (i32 bytes
// "step-<step>-pattern|" repeated) and a few scalars.
inline cutrain::Checkpoint small_checkpoint(int64_t step) {
  cutrain::Checkpoint c;
  c.step = step;
  c.epoch = step / 10;
  c.cursor = {step / 10, step % 10};
  c.seed = 42;
  c.config_json = "{\"model\": \"default\"}";
  c.data_fingerprint = "{\"count\": " + std::to_string(100 + step) + "}";
  c.tensors.emplace_back("conv1.w", uniform({4, 3, 3, 1}, cutrain::DType::f32, uint64_t(step)));
  const std::string pattern = "step-" + std::to_string(step) + "-pattern|";
  c.tensors.emplace_back("pattern", tensor_from_bytes({64}, cutrain::DType::i32, pattern));
  c.scalars["loss_scale"] = 65536;
  c.scalars["best_accuracy"] = 0.5 + double(step) / 1000;
  return c;
}

// Everything equal, every tensor and scalar bit for bit, the tensors in the same order.
inline void require_identical(const cutrain::Checkpoint& got, const cutrain::Checkpoint& want) {
  REQUIRE(got.config_json == want.config_json);
  REQUIRE(got.step == want.step);
  REQUIRE(got.epoch == want.epoch);
  REQUIRE(got.cursor == want.cursor);
  REQUIRE(got.seed == want.seed);
  REQUIRE(got.data_fingerprint == want.data_fingerprint);
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (size_t i = 0; i < want.tensors.size(); i++) {
    const cutrain::Tensor &g = got.tensors[i].second, &w = want.tensors[i].second;
    INFO("tensor " << i << " '" << want.tensors[i].first << "' " << w.str());
    REQUIRE(got.tensors[i].first == want.tensors[i].first);
    REQUIRE(g.dtype() == w.dtype());
    REQUIRE(g.shape() == w.shape());
    REQUIRE(g.device() == cutrain::Device::cpu);
    REQUIRE(std::memcmp(g.raw(), w.raw(), w.bytes()) == 0);
  }
  REQUIRE(got.scalars.size() == want.scalars.size());
  for (const auto& [name, value] : want.scalars) {
    INFO("scalar '" << name << "'");
    REQUIRE(got.scalars.count(name) == 1);
    REQUIRE(std::memcmp(&got.scalars.at(name), &value, sizeof value) == 0);
  }
}

// Flips one bit of the byte `offset` bytes into the first occurrence of `pattern` in the file;
// fails the test when the pattern is not there.
inline void flip_byte_in(const std::string& path, const std::string& pattern, size_t offset) {
  std::vector<uint8_t> bytes = read_bytes(path);
  const auto at = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  REQUIRE_MESSAGE(at != bytes.end(), "pattern '" << pattern << "' not found in " << path);
  REQUIRE(size_t(bytes.end() - at) > offset);
  at[std::ptrdiff_t(offset)] ^= 0x10;
  write_bytes(path, bytes);
}

// The names of the files in dir.
inline std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.insert(e.path().filename().string());
  return names;
}

}  // namespace cutrain_test
