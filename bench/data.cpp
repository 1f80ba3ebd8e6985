// bench_data: how fast the data pipeline is, and whether it hides behind compute.
//
// Prints, measured side by side in one run on the same images:
//   1. decode only: load_sample_uncut in a plain loop on 1, 2, ..., T threads (images/s)
//   2. the loader on T threads, and its ratio to T x the one-thread decode rate
//      (target >= 0.85 on a machine with T free cores)
//   3. the pack path against the JPEG path: the loader reading an HDF5 pack of the same images
//      (target >= 10x)
//   4. the loader feeding a fake compute step that sleeps (a GPU step costs the host thread
//      little): pipeline time against max(load-only, compute-only) (target <= 1.05), at three
//      compute lengths around the balance point, where overlap is hardest.
//
//   bin/bench_data                                  2000 synthetic 256x256 RGB JPEGs -> 112x112
//   bin/bench_data --list data/fashion-mnist/train.txt --size 28 --channels 1 --resize 28
//   bin/bench_data --list data/fashion-mnist/train.txt --size 28 --channels 1 --pad 3
//                                                   (random crops of the zero-padded image)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "data/image.h"
#include "data/loader.h"
#include "data/pack.h"
#include "data/photos.h"
#include "data/source.h"
#include "kernels/check.h"
#include "kernels/rng.h"

using namespace cutrain;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Synthetic photos (data/photos.h) of side x side at quality 90: JPEG does real work.
static ImageList synthesize(const std::string& dir, int n, int side) {
  PhotoSetSpec spec;
  spec.train = n, spec.test = 0;
  spec.min_side = spec.max_side = side;
  spec.min_quality = spec.max_quality = 90;
  write_photo_set(dir, spec);
  return read_image_list(dir + "/train.txt");
}

// load_sample_uncut (what a loader worker runs per sample) over every image, split evenly
// over `threads` plain threads.
static double decode_rate(const ImageList& list, const ImageSpec& spec, int threads) {
  const size_t side = size_t(uncut_side(spec));
  const size_t n = list.samples.size(), bytes = side * side * size_t(spec.channels);
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++)
    pool.emplace_back([&, t] {
      std::vector<uint8_t> out(bytes);
      InputCrop window;
      for (size_t i = size_t(t); i < n; i += size_t(threads))
        load_sample_uncut(list.samples[i].path, spec, rng_u64(1, i), out.data(), window);
    });
  for (auto& th : pool) th.join();
  return double(n) / since(t0);
}

// One epoch through the loader; each batch "computes" for compute_ms (a sleep). Seconds.
static double loader_epoch(std::shared_ptr<const SampleSource> src, int threads, int batch,
                           double compute_ms, LoaderStats* stats = nullptr) {
  SamplerConfig sc;
  sc.num_samples = src->size();
  sc.batch_size = batch;
  sc.seed = 1;
  sc.last_batch = LastBatch::drop;
  LoaderConfig lc;
  lc.threads = threads;
  lc.ring = 4;
  Loader loader(src, sc, lc);
  const auto t0 = Clock::now();
  for (int64_t b = 0; b < loader.sampler().batches_per_epoch(); b++) {
    Batch bt = loader.next();
    if (compute_ms > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(int64_t(compute_ms * 1000)));
    loader.release(bt);
  }
  const double s = since(t0);
  if (stats) *stats = loader.stats();
  return s;
}

static std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

static void run(const std::string& list_path, const std::string& work, int images, int side,
                const ImageSpec& spec, int threads, int batch);

int main(int argc, char** argv) {
  CLI::App app{"bench_data: decode, loader, pack and overlap rates, side by side"};
  std::string list_path, work = fs::temp_directory_path().string() + "/cutrain-bench-data";
  int images = 2000, side = 256, threads = int(std::thread::hardware_concurrency()), batch = 64;
  ImageSpec spec;
  spec.size = 112, spec.channels = 3, spec.resize = 128;
  app.add_option("--list", list_path, "Image list to read (default: synthesize JPEGs)");
  app.add_option("--images", images, "Synthetic images")->capture_default_str();
  app.add_option("--side", side, "Synthetic image side")->capture_default_str();
  app.add_option("--size", spec.size, "Output size")->capture_default_str();
  app.add_option("--resize", spec.resize, "Shorter side before the crop")->capture_default_str();
  app.add_option("--channels", spec.channels, "1 or 3")->capture_default_str();
  app.add_option("--pad", spec.pad, "Random crop padding (zeros; CIFAR-style)")
      ->capture_default_str();
  app.add_option("--threads", threads, "T: the most decode threads")->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->capture_default_str();
  app.add_option("--work", work, "Folder for synthetic images and the pack")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spec.random_crop = spec.resize > spec.size || spec.pad > 0;
  spec.random_flip = true;
  fs::create_directories(work);
  try {
    run(list_path, work, images, side, spec, threads, batch);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_data: %s\n", e.what());
    return 1;
  }
  fs::remove_all(work);
  return 0;
}

static void run(const std::string& list_path, const std::string& work, int images, int side,
                const ImageSpec& spec, int threads, int batch) {

  const ImageList list = list_path.empty() ? synthesize(work + "/jpeg", images, side)
                                           : read_image_list(list_path);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf("# bench_data, %s\n\nhost: %s, %u hardware threads\n", date, cpu_name().c_str(),
              std::thread::hardware_concurrency());
  std::printf("data: %zu images (%s), output %dx%dx%d from shorter side %d, pad %d, batch %d"
              "\n\n",
              list.samples.size(), list_path.empty() ? "synthetic JPEG" : list_path.c_str(),
              spec.size, spec.size, spec.channels, spec.resize ? spec.resize : spec.size,
              spec.pad, batch);

  // 1. decode only
  std::printf("| decode only, threads | images/s | x one thread |\n| --- | --- | --- |\n");
  decode_rate(list, spec, 1);  // warm the page cache
  const double one = decode_rate(list, spec, 1);
  std::vector<int> counts;
  for (int t = 1; t < threads; t *= 2) counts.push_back(t);
  counts.push_back(threads);
  for (int t : counts) {
    const double r = t == 1 ? one : decode_rate(list, spec, t);
    std::printf("| %d | %.0f | %.2f |\n", t, r, r / one);
  }

  // 2. the loader on T threads
  auto jpeg = std::make_shared<ListSource>(list, spec);
  LoaderStats st;
  const double load_s = loader_epoch(jpeg, threads, batch, 0, &st);
  const int64_t used = int64_t(list.samples.size()) / batch * batch;
  const double load_rate = double(used) / load_s;
  std::printf("\n| loader | images/s | vs %d x one-thread decode (target >= 0.85) |\n"
              "| --- | --- | --- |\n| JPEG, %d threads | %.0f | %.2f |\n",
              threads, threads, load_rate, load_rate / (threads * one));
  std::printf("\nloader stages (summed over workers): read %.2f s, decode %.2f s, augment %.2f s;"
              " workers idle %.2f s; consumer waited %.2f s; mean full slots %.2f of 4\n",
              st.stages.read_s, st.stages.decode_s, st.stages.augment_s, st.worker_idle_s,
              st.consumer_wait_s, st.mean_full_slots);

  // 3. pack path against JPEG path
  PackOptions po;
  po.size = spec.resize ? spec.resize : spec.size;
  po.channels = spec.channels;
  po.threads = threads;
  const std::string pack_path = work + "/bench.h5";
  const auto tp = Clock::now();
  write_pack(list, pack_path, po);
  const double pack_write_s = since(tp);
  auto pack = std::make_shared<PackSource>(pack_path, spec);
  const double pack_s = loader_epoch(pack, threads, batch, 0);
  const double pack_rate = double(used) / pack_s;
  std::printf("\n| path, %d threads | images/s | x JPEG path (target >= 10) |\n"
              "| --- | --- | --- |\n| JPEG | %.0f | 1.00 |\n| HDF5 pack | %.0f | %.2f |\n"
              "\n(writing the pack took %.1f s)\n",
              threads, load_rate, pack_rate, pack_rate / load_rate, pack_write_s);

  // 4. overlap with compute, around the balance point
  const int64_t batches = used / batch;
  const double balance_ms = load_s * 1000 / double(batches);
  std::printf("\n| compute per batch | load only | compute only | pipeline | / max(load, compute)"
              " (target <= 1.05) |\n| --- | --- | --- | --- | --- |\n");
  for (double f : {0.5, 1.0, 2.0}) {
    const double ms = balance_ms * f;
    const double compute_s = ms * double(batches) / 1000;
    const double pipe_s = loader_epoch(jpeg, threads, batch, ms);
    std::printf("| %.2f ms | %.3f s | %.3f s | %.3f s | %.3f |\n", ms, load_s, compute_s, pipe_s,
                pipe_s / std::max(load_s, compute_s));
  }
}
