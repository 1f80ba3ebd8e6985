// IDX readers. zlib's gzopen/gzread read gzip files and, transparently, plain ones, so both
// kinds go through the same code.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "kernels/check.h"

namespace cutrain {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* describe_magic(uint32_t magic) {
  if (magic == kIdxImagesMagic) return "an IDX image file";
  if (magic == kIdxLabelsMagic) return "an IDX label file";
  if ((magic >> 16) == 0x1f8b) return "gzip data inside gzip: compressed twice?";
  return "not an IDX uint8 file";
}

// An open IDX file: owns the gzFile, reads exactly what the header promises.
class IdxFile {
 public:
  explicit IdxFile(const std::string& path) : path_(path) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    USER_CHECK(f_ != nullptr,
          path << ": cannot open: " << (errno ? std::strerror(errno) : "gzopen failed"));
    gzbuffer(f_, 1 << 17);
  }
  ~IdxFile() {
    if (f_) gzclose(f_);
  }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  // The magic number, checked against `want`, and `dims` big-endian sizes.
  std::vector<uint32_t> header(uint32_t want, int dims, const char* kind) {
    const size_t bytes = 4 * size_t(1 + dims);
    std::vector<uint8_t> raw = read_up_to(bytes);
    USER_CHECK(raw.size() >= 4, path_ << ": truncated header: " << raw.size()
                                 << " bytes, an IDX " << kind << " file starts with a "
                                 << bytes << "-byte header");
    const uint32_t magic = be32(raw.data());
    USER_CHECK(magic == want, path_ << ": bad magic " << hex32(magic) << " (" << describe_magic(magic)
                               << "), expected " << hex32(want) << " (IDX uint8 " << kind
                               << ", " << dims << " dimension" << (dims > 1 ? "s" : "") << ")");
    USER_CHECK(raw.size() == bytes, path_ << ": truncated header: " << raw.size() << " of "
                                     << bytes << " bytes");
    std::vector<uint32_t> sizes;
    for (int d = 0; d < dims; d++) sizes.push_back(be32(raw.data() + 4 * (1 + d)));
    return sizes;
  }

  // Exactly `declared` bytes, and nothing after them. `what` says what the header declared,
  // for the message when the body does not match it.
  std::vector<uint8_t> body(uint64_t declared, const std::string& what) {
    std::vector<uint8_t> data = read_up_to(declared);
    USER_CHECK(data.size() == declared,
          path_ << ": truncated: the header declares " << what << " = " << declared
                << " bytes of data, the file holds only " << data.size() << gz_status());
    uint8_t extra[4096];
    uint64_t trailing = 0;
    for (int got; (got = read_some(extra, sizeof extra)) > 0;) trailing += uint64_t(got);
    USER_CHECK(trailing == 0, path_ << ": the header declares " << what << " = " << declared
                               << " bytes of data, but " << trailing
                               << " more bytes follow them: sizes do not match the data");
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    USER_CHECK(err == Z_OK, path_ << ": corrupt gzip data after the last byte: " << msg);
    return data;
  }

 private:
  static uint32_t be32(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
  }

  // gzread, with decompression errors turned into messages. 0 at the end of the data.
  int read_some(uint8_t* dst, size_t n) {
    const int got = gzread(f_, dst, unsigned(std::min<size_t>(n, 1u << 30)));
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f_, &err);
      USER_CHECK(false, path_ << ": corrupt gzip data: " << msg);
    }
    return got;
  }

  // Up to n bytes, fewer at the end of the file. Grows in steps, so a header that claims
  // terabytes costs nothing until the data is really there.
  std::vector<uint8_t> read_up_to(uint64_t n) {
    std::vector<uint8_t> out;
    while (out.size() < n) {
      const size_t old = out.size();
      const size_t step = size_t(std::min<uint64_t>(n - old, std::max<size_t>(old, 1 << 20)));
      out.resize(old + step);
      const int got = read_some(out.data() + old, step);
      out.resize(old + size_t(got));
      if (got == 0) break;
    }
    return out;
  }

  // "" when zlib saw nothing wrong; else its complaint (a gzip stream cut short says so).
  std::string gz_status() {
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    return err == Z_OK ? std::string() : std::string(" (gzip: ") + msg + ")";
  }

  std::string path_;
  gzFile f_ = nullptr;
};

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  IdxFile f(path);
  const std::vector<uint32_t> s = f.header(kIdxImagesMagic, 3, "images");
  USER_CHECK(s[1] > 0 && s[2] > 0 && s[1] <= INT_MAX / 2 && s[2] <= INT_MAX / 2,
        path << ": bad image size " << s[1] << "x" << s[2]);
  IdxImages out;
  out.N = s[0];
  out.H = int(s[1]);
  out.W = int(s[2]);
  // N*H*W < 2^96 always; refuse anything over 2^48 bytes (far beyond any IDX file) so the
  // product below cannot overflow.
  const uint64_t per_image = uint64_t(out.H) * uint64_t(out.W);
  USER_CHECK(per_image <= (uint64_t(1) << 48) / std::max<uint64_t>(uint64_t(out.N), 1),
        path << ": the header declares " << out.N << " images of " << out.H << "x" << out.W
             << ": too large to be real");
  std::ostringstream what;
  what << out.N << " images x " << out.H << " x " << out.W;
  out.pixels = f.body(uint64_t(out.N) * per_image, what.str());
  return out;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  IdxFile f(path);
  const uint32_t n = f.header(kIdxLabelsMagic, 1, "labels")[0];
  return f.body(n, std::to_string(n) + " labels");
}

IdxDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path) {
  IdxDataset d;
  d.labels = read_idx_labels(labels_path);
  d.images = read_idx_images(images_path);
  USER_CHECK(int64_t(d.labels.size()) == d.images.N,
        images_path << " holds " << d.images.N << " images but " << labels_path << " holds "
                    << d.labels.size() << " labels: the counts must agree");
  return d;
}

}  // namespace cutrain
