// decode_image and load_image_file: bytes -> Image, or the kind of damage; JPEG (TurboJPEG,
// with its EXIF orientation) and the stb_image formats here, WebP and PGM/PPM beside
// (image_decoders.h). See image.h for the contract and data/README.md for the rules.
#include <fcntl.h>
#include <stb_image.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "data/image.h"
#include "data/image_decoders.h"
#include "data/image_format.h"
#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain {

const char* image_error_name(ImageError e) {
  switch (e) {
    case ImageError::none: return "none";
    case ImageError::missing: return "missing";
    case ImageError::empty: return "empty";
    case ImageError::truncated: return "truncated";
    case ImageError::corrupt: return "corrupt";
    case ImageError::not_image: return "not_image";
    case ImageError::too_large: return "too_large";
  }
  return "unknown";
}

namespace {

// The decoders' own text (libjpeg-turbo's, libwebp's, stb_image's) is quoted as they give it:
// made printable once here, as a bad file's message reaches the terminal.
DecodeResult fail(ImageError e, const std::string& message) { return {e, printable(message)}; }

// ---- colour conversion ----

// ITU-R BT.601 luma, in integers, rounded half up.
void rgb_to_gray(const uint8_t* rgb, size_t npix, uint8_t* gray) {
  for (size_t i = 0; i < npix; i++, rgb += 3)
    gray[i] = uint8_t((299 * rgb[0] + 587 * rgb[1] + 114 * rgb[2] + 500) / 1000);
}

// In place is fine: the loop runs backwards, so it reads a gray byte before overwriting it.
void gray_to_rgb(const uint8_t* gray, size_t npix, uint8_t* rgb) {
  for (size_t i = npix; i-- > 0;) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = gray[i];
}

// Adobe CMYK is stored inverted (255 = no ink), so the amount of light is the sample itself:
// R = C * K / 255, and so on. (libjpeg-turbo's own cmyk_to_rgb in cmyk.h does the same.)
void cmyk_to_rgb(const uint8_t* cmyk, size_t npix, uint8_t* rgb) {
  for (size_t i = 0; i < npix; i++, cmyk += 4, rgb += 3)
    for (int k = 0; k < 3; k++) rgb[k] = uint8_t((cmyk[k] * cmyk[3] + 127) / 255);
}

// Alpha composited on black: each colour sample becomes v * a / 255 rounded to nearest, which
// (v * a + 127) / 255 computes exactly (v * a / 255 is never halfway between integers).
void composite_on_black(const uint8_t* src, size_t npix, int c, uint8_t* dst) {
  for (size_t i = 0; i < npix; i++, src += c, dst += c - 1)
    for (int k = 0; k < c - 1; k++) dst[k] = uint8_t((src[k] * src[c - 1] + 127) / 255);
}

// 16 -> 8 bits rounded to nearest: v * 255 / 65535 = v / 257, never halfway. (stb_image's own
// reduction keeps the high byte, v >> 8: 0x01FF would be 1, not 2.)
void round_16_to_8(const uint16_t* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; i++) dst[i] = uint8_t((uint32_t(src[i]) * 255 + 32767) / 65535);
}

}  // namespace

bool over_cap(int64_t w, int64_t h, int64_t max_pixels) { return h > 0 && w > max_pixels / h; }

DecodeResult too_large(const char* format, int64_t w, int64_t h, int64_t max_pixels) {
  const bool fits = h == 0 || w <= INT64_MAX / h;
  return fail(ImageError::too_large, std::string(format) + " declares " + std::to_string(w) +
                                         "x" + std::to_string(h) + " = " +
                                         (fits ? std::to_string(w * h) : "over 2^63") +
                                         " pixels, over the cap of " +
                                         std::to_string(max_pixels));
}

void convert_channels(const uint8_t* src, int h, int w, int c, int channels, Image& out) {
  const size_t npix = size_t(h) * w;
  out.h = h, out.w = w, out.c = channels;
  out.pixels.resize(npix * channels);
  const bool alpha = c == 2 || c == 4;
  if (alpha && c - 1 == channels) {  // straight into out
    composite_on_black(src, npix, c, out.pixels.data());
    return;
  }
  std::vector<uint8_t> opaque;
  if (alpha) {
    opaque.resize(npix * (c - 1));
    composite_on_black(src, npix, c, opaque.data());
    src = opaque.data(), c -= 1;
  }
  if (c == channels) {
    std::memcpy(out.pixels.data(), src, out.pixels.size());
  } else if (c == 3) {
    rgb_to_gray(src, npix, out.pixels.data());
  } else {
    gray_to_rgb(src, npix, out.pixels.data());
  }
}

namespace {

// ---- JPEG, through TurboJPEG ----

struct TjDestroy {
  void operator()(void* h) const { tjDestroy(h); }
};

// One decompressor per thread, reused while decodes succeed. After a failure it is thrown
// away: a TurboJPEG 2.1.5 handle whose header read or decode stopped on an error keeps the
// marker reader's state and misreads the next file ("Bogus marker length" on a good one).
struct Decompressor {
  std::unique_ptr<void, TjDestroy> handle;
  void* get() {
    if (!handle) handle.reset(tjInitDecompress());
    CHECK(handle != nullptr, "tjInitDecompress failed: " << tjGetErrorStr2(nullptr));
    return handle.get();
  }
  std::string take_error() {  // the message of the last failure, and a fresh handle next time
    std::string why = tjGetErrorStr2(handle.get());
    handle.reset();
    return why;
  }
};
thread_local Decompressor tls_decompressor;

// A JPEG that libjpeg-turbo refused: truncated if its structure is cut short, else corrupt.
DecodeResult jpeg_failure(const uint8_t* b, size_t n, const std::string& why) {
  std::string where;
  if (ends_early(ImageFormat::jpeg, b, n, where))
    return fail(ImageError::truncated, "truncated JPEG: " + where + " (libjpeg-turbo: " + why +
                                           ")");
  return fail(ImageError::corrupt, "corrupt JPEG: " + why);
}

DecodeResult decode_jpeg(const uint8_t* b, size_t n, int channels, int min_side,
                         int64_t max_pixels, Image& out) {
  Decompressor& tj = tls_decompressor;
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  // The header alone: no pixel memory yet. A stream that ends before its frame header leaves
  // w = h = 0 with success (TurboJPEG takes it for a tables-only stream).
  if (tjDecompressHeader3(tj.get(), b, (unsigned long)n, &w, &h, &subsamp, &colorspace) != 0)
    return jpeg_failure(b, n, tj.take_error());
  if (w < 1 || h < 1) {
    tj.handle.reset();
    return jpeg_failure(b, n, "no frame header");
  }
  if (over_cap(w, h, max_pixels)) return too_large("JPEG", w, h, max_pixels);
  // The smallest power-of-two DCT scaling that keeps the shorter side >= min_side. (1/2, 1/4
  // and 1/8 are libjpeg-turbo's fast reduced IDCTs; 1/8 keeps only each block's mean.)
  int den = 1;
  for (int d : {8, 4, 2})
    if (min_side > 0 && std::min((w + d - 1) / d, (h + d - 1) / d) >= min_side) {
      den = d;
      break;
    }
  const int sw = (w + den - 1) / den, sh = (h + den - 1) / den;  // TJSCALED
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int format = cmyk ? TJPF_CMYK : channels == 1 ? TJPF_GRAY : TJPF_RGB;
  std::vector<uint8_t> cmyk_px;
  uint8_t* dst;
  if (cmyk) {
    cmyk_px.resize(size_t(sw) * sh * 4);
    dst = cmyk_px.data();
  } else {
    out.h = sh, out.w = sw, out.c = channels;
    out.pixels.resize(size_t(sw) * sh * channels);
    dst = out.pixels.data();
  }
  // STOPONWARNING: a warning means libjpeg-turbo had to guess (missing data, a bad Huffman
  // code); such a file is reported, not trained on. LIMITSCANS: refuse progressive files with
  // absurd scan counts, a known way to make a small file take minutes.
  if (tjDecompress2(tj.get(), b, (unsigned long)n, dst, sw, 0, sh, format,
                    TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
    out = Image();
    return jpeg_failure(b, n, tj.take_error());
  }
  if (cmyk) {
    std::vector<uint8_t> rgb(size_t(sw) * sh * 3);
    cmyk_to_rgb(cmyk_px.data(), size_t(sw) * sh, rgb.data());
    convert_channels(rgb.data(), sh, sw, 3, channels, out);
  }
  // The camera's orientation, undone on the decoded (maybe DCT-scaled) image, so that every
  // later step (resize, crop, the pack) sees it upright. The scale above needed no turning:
  // it looks at the shorter side, which turning keeps. Finding the orientation is a walk of
  // the header segments, 10-60 ns (jpeg_orientation); turning, a copy of the decoded pixels.
  orient_image(out, jpeg_orientation(b, n));
  return {};
}

// ---- everything else, through stb_image ----

struct StbFree {
  void operator()(void* p) const { stbi_image_free(p); }
};

DecodeResult stb_failure(ImageFormat f, const uint8_t* b, size_t n) {
  const char* why = stbi_failure_reason();  // thread-local in stb_image 2.27
  std::string where;
  if (ends_early(f, b, n, where))
    return fail(ImageError::truncated, std::string("truncated ") + image_format_name(f) + ": " +
                                           where);
  return fail(ImageError::corrupt, std::string("corrupt ") + image_format_name(f) +
                                       ": stb_image: " + (why && *why ? why : "cannot decode"));
}

DecodeResult decode_stb(ImageFormat f, const uint8_t* b, size_t n, int channels,
                        int64_t max_pixels, Image& out) {
  const int len = int(n);  // n <= INT_MAX, checked by the caller
  // The cap, from the header as the format defines it, then from stb_image (TGA & co.).
  int64_t dw = 0, dh = 0;
  if (declared_size(f, b, n, dw, dh) && over_cap(dw, dh, max_pixels))
    return too_large(image_format_name(f), dw, dh, max_pixels);
  int w = 0, h = 0, c = 0;
  if (!stbi_info_from_memory(b, len, &w, &h, &c)) return stb_failure(f, b, n);
  if (over_cap(w, h, max_pixels)) return too_large(image_format_name(f), w, h, max_pixels);
  // stb_image reads missing bytes of a BMP as zeros; the structure check catches that.
  std::string where;
  if (ends_early(f, b, n, where))
    return fail(ImageError::truncated, std::string("truncated ") + image_format_name(f) + ": " +
                                           where);
  // An image with no pixels is no image: stb_image "decoded" a PGM/PPM header broken by a
  // stray byte as 255x0 (found by fuzz/; PGM/PPM are read by decode_pnm now, which checks
  // the same), and nothing says its other readers cannot.
  if (w < 1 || h < 1)
    return fail(ImageError::corrupt, std::string("corrupt ") + image_format_name(f) + ": " +
                                         std::to_string(w) + "x" + std::to_string(h) +
                                         " pixels");
  // Gray comes as gray+alpha, anything with colour as RGBA: stb_image makes an opaque alpha
  // where the file has none, and alpha out of a palette's or a colour key's tRNS and GIF
  // transparency. (Asking for the file's own channel count instead would lose a colour key:
  // stbi_info counts 1 channel for a gray PNG with tRNS, which decodes to 2.)
  const int got = c <= 2 ? 2 : 4;
  std::unique_ptr<stbi_uc, StbFree> px;
  std::vector<uint8_t> rounded;
  if (stbi_is_16_bit_from_memory(b, len)) {  // PNG, PSD
    std::unique_ptr<stbi_us, StbFree> px16(stbi_load_16_from_memory(b, len, &w, &h, &c, got));
    if (!px16) return stb_failure(f, b, n);
    rounded.resize(size_t(w) * h * got);
    round_16_to_8(px16.get(), rounded.size(), rounded.data());
  } else {
    px.reset(stbi_load_from_memory(b, len, &w, &h, &c, got));
    if (!px) return stb_failure(f, b, n);
  }
  convert_channels(px ? px.get() : rounded.data(), h, w, got, channels, out);
  return {};
}

std::string first_bytes(const uint8_t* b, size_t n) {
  std::string s;
  const char* d = "0123456789abcdef";
  for (size_t i = 0; i < std::min<size_t>(n, 8); i++) {
    if (i) s += ' ';
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

}  // namespace

DecodeResult decode_image(const uint8_t* bytes, size_t n, int channels, int min_side,
                          int64_t max_pixels, Image& out) {
  CHECK(channels == 1 || channels == 3, "decode_image: channels must be 1 or 3, got " << channels);
  CHECK(min_side >= 0, "decode_image: min_side must be >= 0, got " << min_side);
  CHECK(max_pixels >= 1, "decode_image: max_pixels must be >= 1, got " << max_pixels);
  CHECK(bytes != nullptr || n == 0, "decode_image: null bytes with n = " << n);
  out = Image();
  if (n == 0) return fail(ImageError::empty, "empty: the file has 0 bytes");
  ImageFormat f = sniff_format(bytes, n);
  if (f == ImageFormat::jpeg) return decode_jpeg(bytes, n, channels, min_side, max_pixels, out);
  if (f == ImageFormat::webp) return decode_webp(bytes, n, channels, max_pixels, out);
  if (f == ImageFormat::pnm) return decode_pnm(bytes, n, channels, max_pixels, out);
  if (n > size_t(INT_MAX))
    return fail(ImageError::too_large, "a " + std::to_string(n) +
                                           "-byte file is over stb_image's 2 GiB limit");
  int w, h, c;
  if (f == ImageFormat::unknown && stbi_info_from_memory(bytes, int(n), &w, &h, &c)) {
    // stb_image's test for PGM/PPM is looser than sniff_format's ("P5" then anything its
    // header reader takes, such as "P53 2 ...", found by fuzz/), and its PGM/PPM reader must
    // not see them: given 16-bit samples and another channel count, it reads past its own
    // buffer (stb_image 2.27). What stb would take for PGM/PPM goes to decode_pnm.
    if (n >= 2 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '6'))
      return decode_pnm(bytes, n, channels, max_pixels, out);
    f = ImageFormat::other;  // TGA, PSD, HDR: no fixed signature, but stb_image knows them
  }
  if (f == ImageFormat::unknown)
    return fail(ImageError::not_image, "not an image: no known signature (starts with " +
                                           first_bytes(bytes, n) + ")");
  return decode_stb(f, bytes, n, channels, max_pixels, out);
}

DecodeResult read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes) {
  bytes.clear();
  auto os_error = [&](const char* what) {
    return fail(ImageError::missing, std::string(what) + ": " + std::strerror(errno));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error("cannot open");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const DecodeResult r = os_error("cannot stat");
    ::close(fd);
    return r;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return fail(ImageError::missing, "cannot read: Is a directory");
  }
  // Read to the end rather than trusting st_size: the file may change while it is read.
  bytes.resize(size_t(std::max<off_t>(st.st_size, 0)) + 1);
  size_t got = 0;
  for (;;) {
    if (got == bytes.size()) bytes.resize(bytes.size() * 2);
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      const DecodeResult e = os_error("cannot read");
      ::close(fd);
      bytes.clear();
      return e;
    }
    got += size_t(r);
  }
  ::close(fd);
  bytes.resize(got);
  return {};
}

DecodeResult load_image_file(const std::string& path, int channels, int min_side,
                             int64_t max_pixels, Image& out) {
  out = Image();
  std::vector<uint8_t> bytes;
  DecodeResult r = read_file_bytes(path, bytes);
  if (!r.ok()) return r;
  return decode_image(bytes.data(), bytes.size(), channels, min_side, max_pixels, out);
}

}  // namespace cutrain
