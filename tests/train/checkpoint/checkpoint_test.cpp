// Checkpoint files: the round trip bit for bit (every dtype, 0-d, empty and one-element
// shapes, NaN payloads, a config larger than an attribute may be); the layout on disk; refused
// inputs; damage (a flipped tensor byte, changed metadata, truncation) refused with the
// checksum message; foreign and missing files; and a writer killed mid-write leaves no file
// under the final name. (xxh64's own vectors: tests/kernels/xxhash64_test.cpp.)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "data/hdf5_io.h"
#include "kernels/xxhash64.h"
#include "tests/train/checkpoint/checkpoint_fixture.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

// A tensor holding exactly these bit patterns (f16: uint16, f32: uint32, f64: uint64).
template <typename Bits>
Tensor from_bits(const std::vector<Bits>& bits, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  REQUIRE(t.bytes() == bits.size() * sizeof(Bits));
  std::memcpy(t.raw(), bits.data(), t.bytes());
  return t;
}

double double_from_bits(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// Every dtype, shapes of rank 0 to 4 with empty and one-element ones, special values (NaN
// payloads, -0, subnormals, inf) and names whose dots are not a hierarchy ("bn1", "bn1.gamma").
Checkpoint everything_checkpoint() {
  Checkpoint c;
  c.step = 123456789;
  c.epoch = 7;
  c.cursor = {7, 42};
  c.seed = UINT64_MAX - 5;  // above INT64_MAX: stored unsigned
  c.data_fingerprint = "{\"count\": 60000, \"hash\": \"0123456789abcdef\"}";
  c.config_json = "{\"model\": \"resnet\", \"note\": \"\xc3\xbc \\\"q\\\"\\n\", \"pad\": \"" +
                  std::string(100000, 'x') + "\"}";  // > 64 KiB, the attribute size limit
  c.tensors.emplace_back("conv1.w", uniform({4, 3, 3, 2}, DType::f16, 1));
  c.tensors.emplace_back("half.specials",
                         from_bits<uint16_t>({0x7c00, 0xfc00, 0x7e01, 0xfd55, 0x8000, 0x0001,
                                              0x03ff, 0x7bff, 0x3c00},
                                             {3, 3}, DType::f16));
  c.tensors.emplace_back("master.conv1.w", uniform({4, 3, 3, 2}, DType::f32, 2));
  c.tensors.emplace_back("float.specials",
                         from_bits<uint32_t>({0x7fc00123, 0xffbfffff, 0x80000000, 0x00000001,
                                              0x7f800000},
                                             {5}, DType::f32));
  c.tensors.emplace_back("sgd.velocity.conv1.w",
                         from_bits<uint64_t>({0x7ff8000000000abcULL, 0x8000000000000000ULL,
                                              0x0000000000000001ULL, 0x3ff0000000000001ULL},
                                             {2, 2}, DType::f64));
  c.tensors.emplace_back("labels", Tensor::from_ints({INT32_MIN, INT32_MAX, -1, 0}, {2, 2}));
  c.tensors.emplace_back("rank0", Tensor::from_floats({3.5f}, {}));
  c.tensors.emplace_back("one", Tensor::from_doubles({-2.25}, {1, 1, 1, 1}));
  c.tensors.emplace_back("empty", Tensor::empty({0}, DType::f32));
  c.tensors.emplace_back("empty3", Tensor::empty({3, 0, 2}, DType::i32));
  c.tensors.emplace_back("bn1", uniform({2}, DType::f32, 3));
  c.tensors.emplace_back("bn1.gamma", uniform({2}, DType::f32, 4));
  c.tensors.emplace_back("block2.bn1.running_mean", uniform({5}, DType::f32, 5));
  c.tensors.emplace_back("a name with spaces, \xc3\xbc", uniform({1}, DType::f64, 6));
  c.scalars["loss_scale"] = 65536;
  c.scalars["scaler.clean_steps"] = 1999;
  c.scalars["best/top1"] = 0.9371;
  c.scalars["nan"] = double_from_bits(0x7ff8000000000123ULL);
  c.scalars["neg_zero"] = -0.0;
  c.scalars["tiny"] = double_from_bits(1);
  c.scalars["-inf"] = -INFINITY;
  return c;
}

}  // namespace

TEST_CASE("checkpoint: every dtype and shape, scalars, cursor and config come back bit for bit") {
  TempDir dir;
  const std::string path = dir / "c.h5";
  const Checkpoint c = everything_checkpoint();
  write_checkpoint(c, path);
  REQUIRE(files_in(dir.str()) == std::set<std::string>{"c.h5"});  // no temporary file left
  require_identical(read_checkpoint(path), c);
  REQUIRE(read_checkpoint(path).tensor("bn1.gamma").raw() != c.tensor("bn1.gamma").raw());
  REQUIRE_ERROR(c.tensor("bn2"), "the checkpoint has no tensor 'bn2'");

  // Nothing at all: no tensors, no scalars, an empty config.
  write_checkpoint(Checkpoint(), dir / "empty.h5");
  require_identical(read_checkpoint(dir / "empty.h5"), Checkpoint());
  fs::remove(dir / "empty.h5");

  // Writing again replaces the file whole.
  const Checkpoint other = small_checkpoint(5);
  write_checkpoint(other, path);
  require_identical(read_checkpoint(path), other);
  REQUIRE(files_in(dir.str()) == std::set<std::string>{"c.h5"});
}

TEST_CASE("checkpoint: the layout on disk is the documented one") {
  TempDir dir;
  const std::string path = dir / "c.h5";
  const Checkpoint c = everything_checkpoint();
  write_checkpoint(c, path);
  H5Lock lock;
  H5Handle file = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, path);
  const hid_t root = file.get();
  REQUIRE(h5_read_string_attribute(root, "format", path) == "cutrain-checkpoint");
  REQUIRE(h5_read_int_attribute(root, "version", path) == 2);
  REQUIRE(h5_read_int_attribute(root, "step", path) == 123456789);
  REQUIRE(h5_read_uint_attribute(root, "seed", path) == UINT64_MAX - 5);
  REQUIRE(h5_read_int_attribute(root, "cursor_batch", path) == 42);
  REQUIRE(h5_read_string_attribute(root, "data_fingerprint", path) == c.data_fingerprint);

  std::vector<std::string> names;
  std::vector<uint64_t> hashes;
  for (const auto& nt : c.tensors) {
    names.push_back(nt.first);
    hashes.push_back(xxh64(nt.second.raw(), nt.second.bytes()));
  }
  REQUIRE(h5_read_strings(root, "tensor_names", path) == names);
  REQUIRE(h5_read_uint_attribute(root, "checksum", path) == checkpoint_checksum(c, hashes));

  H5Handle tensors = h5_open_group(root, "tensors", path);
  REQUIRE(h5_group_size(tensors.get(), path) == int64_t(c.tensors.size()));
  for (size_t i = 0; i < c.tensors.size(); i++) {
    const Tensor& t = c.tensors[i].second;
    INFO(names[i]);
    H5Handle ds = h5_open_dataset(tensors.get(), names[i], path);  // flat: dots are not paths
    const H5DatasetInfo info = h5_dataset_info(ds.get(), path);
    REQUIRE(info.dims == std::vector<hsize_t>(t.shape().begin(), t.shape().end()));
    REQUIRE(info.type_bytes == dtype_size(t.dtype()));  // f16 stored in 16 bits
    REQUIRE(info.type_class == (t.dtype() == DType::i32 ? H5T_INTEGER : H5T_FLOAT));
    REQUIRE(h5_read_uint_attribute(ds.get(), "xxh64", path) == hashes[i]);
    H5Handle dcpl = h5_owned(H5Dget_create_plist(ds.get()), H5Pclose, "dcpl");
    REQUIRE(H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS);
  }
  H5Handle half = h5_open_dataset(tensors.get(), "conv1.w", path);
  H5Handle half_type = h5_owned(H5Dget_type(half.get()), H5Tclose, "type");
  REQUIRE(H5Tget_ebias(half_type.get()) == 15);  // IEEE binary16, as numpy's float16
  REQUIRE(H5Tget_order(half_type.get()) == H5T_ORDER_LE);

  H5Handle scalars = h5_open_group(root, "scalars", path);
  REQUIRE(h5_attribute_names(scalars.get(), path).size() == c.scalars.size());
  REQUIRE(h5_read_double_attribute(scalars.get(), "loss_scale", path) == 65536);
}

TEST_CASE("checkpoint: bad names and values are refused before any file is made") {
  TempDir dir;
  const std::string path = dir / "c.h5";
  auto refused = [&](const std::string& needle, auto&& spoil) {
    Checkpoint c = small_checkpoint(1);
    spoil(c);
    INFO("expecting: " << needle);
    REQUIRE_ERROR(write_checkpoint(c, path), needle);
    REQUIRE(files_in(dir.str()).empty());
  };
  const Tensor t = Tensor::zeros({2}, DType::f32);
  refused("empty name", [&](Checkpoint& c) { c.tensors.emplace_back("", t); });
  refused("'a/b' is refused", [&](Checkpoint& c) { c.tensors.emplace_back("a/b", t); });
  refused("'.' is refused", [&](Checkpoint& c) { c.tensors.emplace_back(".", t); });
  refused("tensor name contains a NUL",
          [&](Checkpoint& c) { c.tensors.emplace_back(std::string("a\0b", 3), t); });
  refused("two checkpoint tensors are named 'conv1.w'",
          [&](Checkpoint& c) { c.tensors.emplace_back("conv1.w", t); });
  refused("'w2' is undefined", [&](Checkpoint& c) { c.tensors.emplace_back("w2", Tensor()); });
  refused("scalar has an empty name", [&](Checkpoint& c) { c.scalars[""] = 1; });
  refused("none may be negative", [&](Checkpoint& c) { c.step = -1; });
  refused("none may be negative", [&](Checkpoint& c) { c.cursor.batch = -1; });
  refused("config_json has a NUL", [&](Checkpoint& c) { c.config_json += std::string(1, '\0'); });
  if (gpu_usable())
    refused("snapshot it to the CPU first",
            [&](Checkpoint& c) { c.tensors.emplace_back("gpu", t.to(test_gpu())); });

  const Checkpoint ok = small_checkpoint(1);
  fs::create_directory(dir / "sub");
  REQUIRE_ERROR(write_checkpoint(ok, dir / "sub"), "is a folder, not a checkpoint file");
  REQUIRE_USER_ERROR(write_checkpoint(ok, dir / "no/such/c.h5"),
                     "cannot create '" + dir / "no/such/c.h5" + "': No such file or directory");
  REQUIRE(files_in(dir.str()) == std::set<std::string>{"sub"});
}

TEST_CASE("checkpoint: a flipped byte in a tensor is refused with the checksum message") {
  TempDir dir;
  const std::string path = dir / "c.h5";
  Checkpoint c = small_checkpoint(3);
  c.tensors.emplace_back("half", tensor_from_bytes({200}, DType::f16, "half-pattern|"));
  write_checkpoint(c, path);
  const std::vector<uint8_t> good = read_bytes(path);
  for (const auto& [tensor, pattern] : {std::pair<std::string, std::string>{"pattern",
                                                                            "step-3-pattern|"},
                                        {"half", "half-pattern|"}}) {
    INFO(tensor);
    write_bytes(path, good);
    require_identical(read_checkpoint(path), c);  // the control: the same file reads
    flip_byte_in(path, pattern + pattern, 20);
    REQUIRE_ERROR(read_checkpoint(path), "checksum mismatch: " + path + " is damaged");
    REQUIRE_ERROR(read_checkpoint(path), "the bytes of tensor '" + tensor + "' differ");
  }
}

TEST_CASE("checkpoint: a damaged string length is refused before libhdf5 sizes a buffer by it") {
  // (found by fuzz/: libhdf5 1.10 allocates and zeroes as many bytes as a string's reference
  // says, up to 4 GiB, before it finds the reference leads nowhere)
  TempDir dir;
  const std::string path = dir / "c.h5";
  write_checkpoint(small_checkpoint(3), path);
  haddr_t names = HADDR_UNDEF;  // the references of /tensor_names: [length u32][address][index]
  {
    H5Lock lock;
    H5Handle f = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, path);
    H5Handle ds = h5_owned(H5Dopen2(f.get(), "tensor_names", H5P_DEFAULT), H5Dclose, "names");
    names = H5Dget_offset(ds.get());
  }
  REQUIRE(names != HADDR_UNDEF);
  std::vector<uint8_t> bytes = read_bytes(path);
  REQUIRE(bytes[names + 16] == 7);  // "pattern"
  bytes[names + 16 + 3] = 0x6b;
  write_bytes(path, bytes);
  REQUIRE_ERROR(read_checkpoint(path), "dataset 'tensor_names' is damaged: string 1 claims "
                                       "1795162119 bytes, more than the file's");
}

TEST_CASE("checkpoint: metadata changed after writing is refused with the checksum message") {
  TempDir dir;
  const std::string path = dir / "c.h5";
  // Rewrites one attribute of the written file (of the root, or of the group `group`).
  auto rewrite = [&](const char* group, const char* name, auto write) {
    write_checkpoint(small_checkpoint(3), path);
    H5Lock lock;
    H5Handle file = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, path);
    H5Handle g = group ? h5_open_group(file.get(), group, path) : H5Handle();
    const hid_t obj = group ? g.get() : file.get();
    REQUIRE(H5Adelete(obj, name) >= 0);
    write(obj, name);
  };
  rewrite(nullptr, "step", [](hid_t o, const char* n) {
    h5_write_int_attribute(o, n, 4, H5T_STD_I64LE);
  });
  REQUIRE_ERROR(read_checkpoint(path), "checksum mismatch: " + path + " is damaged (its metadata");
  rewrite("scalars", "loss_scale", [](hid_t o, const char* n) {
    h5_write_double_attribute(o, n, 32768);
  });
  REQUIRE_ERROR(read_checkpoint(path), "checksum mismatch: " + path + " is damaged (its metadata");
  rewrite(nullptr, "config_json", [](hid_t o, const char* n) {
    h5_write_string_attribute(o, n, "{\"model\": \"resnet\"}");
  });
  REQUIRE_ERROR(read_checkpoint(path), "checksum mismatch: " + path + " is damaged (its metadata");
  rewrite(nullptr, "data_fingerprint", [](hid_t o, const char* n) {
    h5_write_string_attribute(o, n, "{\"count\": 7}");
  });
  REQUIRE_ERROR(read_checkpoint(path), "checksum mismatch: " + path + " is damaged (its metadata");
  rewrite(nullptr, "version", [](hid_t o, const char* n) {
    h5_write_int_attribute(o, n, 3, H5T_STD_I32LE);
  });
  REQUIRE_USER_ERROR(read_checkpoint(path), "checkpoint format version 3, but this cutrain reads "
                                            "versions 1 to 2: a newer cutrain wrote it");
  rewrite(nullptr, "seed", [](hid_t, const char*) {});
  REQUIRE_ERROR(read_checkpoint(path), path + ": attribute 'seed' is missing");
}

TEST_CASE("checkpoint: a version 1 file (before data fingerprints) is read and verified") {
  // What an older cutrain wrote: no data_fingerprint, version 1 in the file and the checksum.
  TempDir dir;
  const std::string path = dir / "c.h5";
  Checkpoint c = small_checkpoint(3);
  c.data_fingerprint.clear();
  write_checkpoint(c, path);
  {
    H5Lock lock;
    H5Handle file = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, path);
    REQUIRE(H5Adelete(file.get(), "version") >= 0);
    h5_write_int_attribute(file.get(), "version", 1, H5T_STD_I32LE);
    REQUIRE(H5Adelete(file.get(), "checksum") >= 0);
    std::vector<uint64_t> hashes;
    for (const auto& nt : c.tensors) hashes.push_back(xxh64(nt.second.raw(), nt.second.bytes()));
    h5_write_uint_attribute(file.get(), "checksum", checkpoint_checksum(c, hashes, 1));
  }
  require_identical(read_checkpoint(path), c);
}

TEST_CASE("checkpoint: truncated, missing, foreign and non-HDF5 files are refused clearly") {
  TempDir dir;
  const std::string path = dir / "c.h5";
  write_checkpoint(small_checkpoint(3), path);
  const std::vector<uint8_t> good = read_bytes(path);
  write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + long(good.size() / 2)));
  REQUIRE_ERROR(read_checkpoint(path), "cannot open checkpoint '" + path + "': truncated file");
  write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + 200));
  REQUIRE_ERROR(read_checkpoint(path), "cannot open checkpoint '" + path + "': truncated file");

  REQUIRE_ERROR(read_checkpoint(dir / "none.h5"), "cannot open checkpoint '" + dir / "none.h5" +
                                                     "': No such file or directory");
  REQUIRE_ERROR(read_checkpoint(dir.str()), "not a regular file");
  write_text(dir / "text.h5", "{\"this is\": \"json\"}\n");
  REQUIRE_ERROR(read_checkpoint(dir / "text.h5"),
                "is not an HDF5 file, so not a cutrain checkpoint");
  {
    H5Lock lock;
    H5Handle f = h5_owned(H5Fcreate((dir / "pack.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT,
                                    H5P_DEFAULT),
                          H5Fclose, "create");
    h5_write_string_attribute(f.get(), "format", "cutrain-pack");
  }
  REQUIRE_ERROR(read_checkpoint(dir / "pack.h5"), "is an HDF5 file but not a cutrain checkpoint");
}

TEST_CASE("checkpoint: a writer killed mid-write leaves no file under the final name") {
  TempDir dir;
  const std::string good = checkpoint_path(dir.str(), 10);
  const std::string next = checkpoint_path(dir.str(), 20);
  write_checkpoint(small_checkpoint(10), good);
  Checkpoint big = small_checkpoint(20);  // 96 MiB: the write takes far longer than the kill
  for (int i = 0; i < 3; i++)
    big.tensors.emplace_back("big" + std::to_string(i), Tensor::zeros({8 << 20}, DType::f32));

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      write_checkpoint(big, next);
    } catch (...) {
    }
    _exit(3);  // not killed in time: the checks below fail
  }
  // Kill it as soon as its temporary file exists: the file is open and being written.
  const std::string tmp = next + ".tmp-" + std::to_string(child);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(tmp) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  kill(child, SIGKILL);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);

  REQUIRE(!fs::exists(next));
  REQUIRE(fs::exists(tmp));  // kill -9 runs no clean-up
  std::vector<std::string> skipped;
  REQUIRE(newest_checkpoint(dir.str(), &skipped) == good);
  REQUIRE(skipped == std::vector<std::string>{tmp + ": the temporary file of an unfinished write"});
  require_identical(read_checkpoint(good), small_checkpoint(10));

  // The next write of that name clears the dead writer's leftover.
  write_checkpoint(small_checkpoint(20), next);
  REQUIRE(!fs::exists(tmp));
  REQUIRE(newest_checkpoint(dir.str(), &skipped) == next);
}
