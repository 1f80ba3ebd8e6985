// defines: what decode_image needs to know about a file before (or after) decoding it, from
// its bytes alone: sniff_format (the magic bytes), declared_size (the header's claim, for the
// pixel cap) and ends_early (does the file's own structure say that more bytes should
// follow?). Internal to data/; image.h is the API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace cutrain {

// jpeg goes to libjpeg-turbo, the rest to stb_image. `other` is a file with no known
// signature that stb_image still recognises (TGA, PSD, HDR: formats without a fixed magic);
// sniff_format never returns it, decode_image does after asking stb.
enum class ImageFormat { unknown, jpeg, png, gif, bmp, pnm, other };

// "JPEG", "PNG", ... for messages.
const char* image_format_name(ImageFormat f);

// The format whose signature the file starts with. A file shorter than a signature that
// matches its beginning (at least 2 bytes: "\xFF\xD8" is a JPEG cut after its first marker)
// counts as that format, so that it is reported as truncated rather than as not an image.
//   JPEG FF D8 FF | PNG 89 'PNG' 0D 0A 1A 0A | GIF 'GIF87a' 'GIF89a' | BMP 'BM'
//   binary PGM/PPM 'P5' 'P6' then whitespace.
ImageFormat sniff_format(const uint8_t* b, size_t n);

// True when the structure of a file of format f declares more bytes than there are; `where`
// then says where it ends, e.g. "the data ends inside the entropy-coded data of scan 3, before
// the end-of-image marker". Checks (nothing is decoded; header fields and markers only):
//   JPEG: walks the marker segments and, after each SOS, the entropy-coded data up to the next
//         marker, until EOI. Truncated when a segment or the data runs past the end.
//   PNG:  walks the chunks (length, type, data, CRC) until IEND.
//   BMP:  uncompressed (BI_RGB, BI_BITFIELDS): pixel offset + padded rows * height.
//   PGM/PPM (binary): header + width * height * channels * (maxval > 255 ? 2 : 1).
// False for GIF and other formats (not checked: stb_image's verdict stands) and for a file
// whose structure is broken in a way that is not a missing tail (that is corruption).
bool ends_early(ImageFormat f, const uint8_t* b, size_t n, std::string& where);

// The image size a PNG (IHDR), GIF (logical screen), BMP or PGM/PPM header declares, read
// without stb_image, so the pixel cap does not depend on stb's own limits or messages. False
// when the format has no such check here (JPEG: TurboJPEG reads it) or the header is cut.
bool declared_size(ImageFormat f, const uint8_t* b, size_t n, int64_t& w, int64_t& h);

}  // namespace cutrain
