// bench_photos: writes the decode-heavy workload, a folder of synthetic photo-like JPEGs
// (data/photos.h) with train/test lists and classes.txt, and says what it wrote: the images,
// their mean bits per pixel (refused below --min-bpp) and the time. A complete set with the same
// settings is kept (recipe.txt), so a second call costs a few file checks.
//
//   bin/bench_photos --out data-cache/photos                     5,000 + 1,000, 400-600 px
//   bin/bench_photos --out /tmp/p --train 200 --test 50 --threads 2
//   bin/cutrain train --train data-cache/photos/train.txt --size 112 --resize 128 ...
//                                                   (bench/compare.sh --photos does this)
#include <CLI/CLI.hpp>

#include <cstdio>

#include "data/photos.h"
#include "kernels/check.h"
#include "train/cli/progress.h"

using namespace cutrain;

int main(int argc, char** argv) {
  CLI::App app{"bench_photos: the decode-heavy workload, synthetic photo-like JPEGs"};
  std::string out;
  PhotoSetSpec spec;
  ImageSetOptions opt;
  app.add_option("--out", out, "Folder to write (train/, test/, the lists, classes.txt)")
      ->required();
  app.add_option("--train", spec.train, "Training images")->capture_default_str();
  app.add_option("--test", spec.test, "Test images")->capture_default_str();
  app.add_option("--classes", spec.classes, "Classes (2..10)")->capture_default_str();
  app.add_option("--min-side", spec.min_side, "Each side drawn from min..max")
      ->capture_default_str();
  app.add_option("--max-side", spec.max_side)->capture_default_str();
  app.add_option("--min-quality", spec.min_quality, "JPEG quality drawn from min..max")
      ->capture_default_str();
  app.add_option("--max-quality", spec.max_quality)->capture_default_str();
  app.add_option("--seed", spec.seed)->capture_default_str();
  app.add_option("--min-bpp", spec.min_bits_per_pixel, "Refuse a set below this mean")
      ->capture_default_str();
  app.add_option("--threads", opt.threads, "Encoder threads (0: every core)")
      ->capture_default_str();
  app.add_flag("--force", opt.force, "Write again even when a complete set is there");
  CLI11_PARSE(app, argc, argv);
  opt.progress = Progress("wrote", "photos");
  try {
    const PhotoSetSummary s = write_photo_set(out, spec, opt);
    std::printf("bench_photos: %s %lld images (%lld training, %lld test, %d classes) in %s: "
                "%.2f bits per pixel, %.1f MB, %.1f megapixels",
                s.files.reused ? "kept the" : "wrote", (long long)s.images,
                (long long)spec.train, (long long)spec.test, spec.classes, out.c_str(),
                s.bits_per_pixel, double(s.bytes) / 1e6, double(s.pixels) / 1e6);
    if (!s.files.reused)
      std::printf("; %.1f s on %d threads", s.files.seconds, s.files.threads);
    std::printf("\n");
  } catch (const UserError& e) {
    std::fprintf(stderr, "bench_photos: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_photos: %s\n", e.what());
    return 1;
  }
  return 0;
}
