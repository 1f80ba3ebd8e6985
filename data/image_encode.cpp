// encode_jpeg: TurboJPEG compression. See image.h.
#include <turbojpeg.h>

#include <memory>

#include "data/image.h"
#include "kernels/check.h"

namespace cutrain {

namespace {
struct TjDestroy {
  void operator()(void* h) const { tjDestroy(h); }
};
using TjHandle = std::unique_ptr<void, TjDestroy>;
}  // namespace

std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int h, int w, int channels,
                                 int quality, bool progressive) {
  CHECK(pixels != nullptr, "encode_jpeg: no pixels");
  CHECK(h >= 1 && w >= 1, "encode_jpeg: image size " << h << "x" << w << " is empty");
  CHECK(channels == 1 || channels == 3 || channels == 4,
        "encode_jpeg: channels must be 1 (gray), 3 (RGB) or 4 (CMYK), got " << channels);
  CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality must be in [1, 100], got "
                                            << quality);
  // Compressors are reused (one per thread: handles are not thread-safe, and the importer's
  // workers each keep their own), but never across the progressive/baseline switch: in
  // libjpeg-turbo 2.1.5 a handle that wrote a progressive file (optimized Huffman tables)
  // writes corrupt baseline files afterwards ("bad Huffman code"; the stale-table problem of
  // libjpeg-turbo PR #589). So each mode has its own handle.
  thread_local TjHandle baseline(tjInitCompress()), progressive_handle(tjInitCompress());
  void* handle = progressive ? progressive_handle.get() : baseline.get();
  CHECK(handle != nullptr, "encode_jpeg: tjInitCompress failed: " << tjGetErrorStr2(nullptr));

  const int format = channels == 1 ? TJPF_GRAY : channels == 3 ? TJPF_RGB : TJPF_CMYK;
  const int subsamp = channels == 1 ? TJSAMP_GRAY : TJSAMP_444;
  const int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
  unsigned char* jpeg = nullptr;  // TurboJPEG allocates it; freed with tjFree below
  unsigned long size = 0;
  const int rc = tjCompress2(handle, pixels, w, 0 /* pitch: w * channels */, h, format,
                             &jpeg, &size, subsamp, quality, flags);
  if (rc != 0) {
    const std::string why = tjGetErrorStr2(handle);
    tjFree(jpeg);
    CHECK(false, "encode_jpeg: tjCompress2 failed on a " << h << "x" << w << "x" << channels
                                                         << " image: " << why);
  }
  std::vector<uint8_t> out(jpeg, jpeg + size);
  tjFree(jpeg);
  return out;
}

}  // namespace cutrain
