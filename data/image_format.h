// defines: what decode_image needs to know about a file before (or after) decoding it, from
// its bytes alone: sniff_format (the magic bytes), declared_size (the header's claim, for the
// pixel cap), ends_early (does the file's own structure say that more bytes should follow?),
// parse_pnm (a PGM/PPM header) and jpeg_orientation (a photo's EXIF orientation tag).
// Internal to data/; image.h is the API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace cutrain {

// jpeg goes to libjpeg-turbo, webp to libwebp, pnm to decode_pnm (read by hand), the rest to
// stb_image. `other` is a file with no known signature that stb_image still recognises (TGA,
// PSD, HDR: formats without a fixed magic); sniff_format never returns it, decode_image does
// after asking stb.
enum class ImageFormat { unknown, jpeg, png, gif, bmp, pnm, webp, other };

// "JPEG", "PNG", ... for messages.
const char* image_format_name(ImageFormat f);

// The format whose signature the file starts with. A file shorter than a signature that
// matches its beginning (at least 2 bytes: "\xFF\xD8" is a JPEG cut after its first marker)
// counts as that format, so that it is reported as truncated rather than as not an image.
//   JPEG FF D8 FF | PNG 89 'PNG' 0D 0A 1A 0A | GIF 'GIF87a' 'GIF89a' | BMP 'BM'
//   binary PGM/PPM 'P5' 'P6' then whitespace | WebP 'RIFF', 4 bytes of size, 'WEBP'.
ImageFormat sniff_format(const uint8_t* b, size_t n);

// True when the structure of a file of format f declares more bytes than there are; `where`
// then says where it ends, e.g. "the data ends inside the entropy-coded data of scan 3, before
// the end-of-image marker". Checks (nothing is decoded; header fields and markers only):
//   JPEG: walks the marker segments and, after each SOS, the entropy-coded data up to the next
//         marker, until EOI. Truncated when a segment or the data runs past the end.
//   PNG:  walks the chunks (length, type, data, CRC) until IEND.
//   BMP:  uncompressed (BI_RGB, BI_BITFIELDS): pixel offset + padded rows * height.
//   PGM/PPM (binary): header + width * height * channels * (maxval > 255 ? 2 : 1).
//   WebP: the RIFF header's size (the whole container: every chunk) against the file's.
// False for GIF and other formats (not checked: stb_image's verdict stands) and for a file
// whose structure is broken in a way that is not a missing tail (that is corruption).
bool ends_early(ImageFormat f, const uint8_t* b, size_t n, std::string& where);

// The image size a PNG (IHDR), GIF (logical screen) or BMP header declares, read without
// stb_image, so the pixel cap does not depend on stb's own limits or messages. False when the
// format has no such check here (JPEG: TurboJPEG reads it, WebP: libwebp, PGM/PPM: parse_pnm)
// or the header is cut.
bool declared_size(ImageFormat f, const uint8_t* b, size_t n, int64_t& w, int64_t& h);

// A binary PGM/PPM header: 'P5' | 'P6', then width, height and maxval as decimal text
// separated by whitespace and '#' comments, then one whitespace byte, then the samples
// (big-endian 16-bit ones when maxval > 255).
struct PnmHeader {
  bool complete = false;         // all three numbers and the byte after them are present
  bool valid = true;             // false: something that is not a number where one must be
  int64_t field[3] = {0, 0, 0};  // width, height, maxval (each read up to just over 2^32)
  size_t data = 0;               // offset of the first sample
};
PnmHeader parse_pnm(const uint8_t* b, size_t n);

// The orientation tag (0x0112) of a JPEG's EXIF block: 1..8 as the EXIF standard numbers
// them (1 = stored upright; orient_image in image.h says what each means), or 1 when the file
// has no EXIF block, or one that cannot be read (a wrong byte order, offsets past the block,
// a value outside 1..8, a type other than SHORT): a photo is never a bad file because of its
// EXIF. Reads the marker segments after SOI up to the first SOS, the first APP1 segment that
// starts with "Exif\0\0", and in it only the TIFF header and the entries of IFD0.
int jpeg_orientation(const uint8_t* b, size_t n);

}  // namespace cutrain
