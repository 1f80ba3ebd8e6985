// TrainConfig: validation messages, the JSON round trip, what a resumed run may change, the
// device choice, and the fields resolved from real data (Fashion-MNIST JPEGs and a pack).
#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "data/pack.h"
#include "kernels/gpu.h"
#include "nn/model_spec.h"
#include "tests/test_util.h"
#include "tests/train/fashion_mnist_data.h"
#include "train/setup/config.h"
#include "train/setup/device.h"
#include "train/setup/resolve.h"
#include "train/setup/sources.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("config: every numeric option has a range; non-finite and absurd values are refused") {
  struct Case {
    std::function<void(TrainConfig&)> set;
    std::string says;
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<Case> cases = {
      {[](TrainConfig& c) { c.threads = 400; }, "--threads must be in [0, 256], got 400"},
      {[](TrainConfig& c) { c.threads = -2; }, "--threads must be in [0, 256], got -2"},
      {[](TrainConfig& c) { c.compute_threads = 300; },
       "--compute-threads must be in [0, 256], got 300"},
      {[](TrainConfig& c) { c.size = 100000; }, "--size must be in [0, 4096], got 100000"},
      {[](TrainConfig& c) { c.resize = 5000; }, "--resize must be in [0, 4096], got 5000"},
      {[](TrainConfig& c) { c.pad = 9999; }, "--pad must be in [-1, 4096], got 9999"},
      {[](TrainConfig& c) { c.batch = 1 << 20; }, "--batch must be in [1, 65536], got 1048576"},
      {[](TrainConfig& c) { c.accum = 256; }, "--accum must be in [1, 128], got 256"},
      {[](TrainConfig& c) { c.epochs = 0; }, "--epochs must be in [1, 1000000], got 0"},
      {[&](TrainConfig& c) { c.lr = 1e30; }, "--lr must be a finite number in [0, 10], got 1e+30"},
      {[&](TrainConfig& c) { c.lr = nan; }, "--lr must be a finite number in [0, 10], got nan"},
      {[&](TrainConfig& c) { c.lr = inf; }, "--lr must be a finite number in [0, 10], got inf"},
      {[&](TrainConfig& c) { c.wd = inf; }, "--wd must be a finite number in [0, 1], got inf"},
      {[&](TrainConfig& c) { c.wd = 3; }, "--wd must be a finite number in [0, 1], got 3"},
      {[&](TrainConfig& c) { c.momentum = 1; }, "--momentum must be a finite number in [0, 1)"},
      {[&](TrainConfig& c) { c.momentum = nan; }, "--momentum must be a finite number in [0, 1)"},
      {[&](TrainConfig& c) { c.warmup = inf; }, "--warmup must be a finite number in [0, 1e+06]"},
      {[&](TrainConfig& c) { c.label_smoothing = nan; }, "--label-smoothing must be a finite"},
      {[&](TrainConfig& c) { c.mean = {nan}, c.std = {0.3}; }, "--mean must be a finite number"},
      {[&](TrainConfig& c) { c.mean = {128}, c.std = {0.3}; }, "--mean must be a finite number in [-1, 2]"},
      {[&](TrainConfig& c) { c.mean = {0.5}, c.std = {inf}; }, "--std values must be finite"},
      {[](TrainConfig& c) { c.keep = 0; }, "--keep must be in [1, 1000000], got 0"},
      {[](TrainConfig& c) { c.log_every = 0; }, "--log-every must be in [1, 2147483647], got 0"},
      {[](TrainConfig& c) { c.checkpoint_every = -5; }, "--checkpoint-every must be in [0, "},
      {[](TrainConfig& c) { c.check_replicas = -1; }, "--check-replicas must be in [0, "},
      {[](TrainConfig& c) {
         c.devices = "cpu";
         for (int i = 0; i < 64; i++) c.devices += ",cpu";
       },
       "--devices lists 65 replicas; at most 64"},
  };
  for (const Case& k : cases) {
    TrainConfig c;
    c.train = "x";
    k.set(c);
    INFO(k.says);
    REQUIRE_USER_ERROR(validate_config(c), k.says);
  }
}

TEST_CASE("config: the defaults are valid once --train is given; every problem is listed") {
  TrainConfig c;
  REQUIRE_ERROR(validate_config(c), "--train is required");
  c.train = "train.txt";
  validate_config(c);
  c.batch = 100, c.accum = 3, c.lr = -1, c.device = "gpu", c.schedule = "onecycle", c.warmup = 2;
  std::string msg;
  try {
    validate_config(c);
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  REQUIRE(msg.find("--batch 100 is not a multiple of --accum 3") != std::string::npos);
  REQUIRE(msg.find("--lr must be a finite number in [0, 10], got -1 (0: the optimizer's default)") !=
          std::string::npos);
  REQUIRE(msg.find("--device gpu: expected auto, cpu or cuda") != std::string::npos);
  REQUIRE(msg.find("onecycle has its own warm-up") != std::string::npos);
  TrainConfig d;
  d.train = "x", d.channels = 3, d.mean = {0.5}, d.std = {0.5};
  REQUIRE_ERROR(validate_config(d), "1 values for 3 channels");
  d.mean = {0.5, 0.5, 0.5}, d.std = {0.2, 0, 0.2};
  REQUIRE_ERROR(validate_config(d), "--std values must be finite and in (0, 10]");
  TrainConfig g;
  g.train = "x", g.conv = "winograd";
  REQUIRE_ERROR(validate_config(g), "--conv winograd: expected auto, direct, tc, cudnn or onednn");
  g.conv = "cudnn", g.linear = "cudnn";
  REQUIRE_ERROR(validate_config(g), "--linear cudnn: expected auto, direct, tc, cublas or onednn");
  // --cuda-graph, on by default: where it cannot apply (the CPU, GPU replicas, mpirun) it does
  // nothing, and the run's header says so (Engine::graph_description), so every configuration
  // takes it and a run that used it resumes anywhere.
  TrainConfig h;
  h.train = "x";
  REQUIRE(h.cuda_graph);
  validate_config(h);
  h.devices = "3";
  validate_config(h);
  h.devices = "0,0";
  validate_config(h);
  h.devices = "cpu,cpu";
  validate_config(h);
  h.devices = "", h.device = "cpu";
  validate_config(h);
  h.max_skips = 0;
  REQUIRE_ERROR(validate_config(h), "--max-skips must be in [1, 1000000], got 0");
  // replicas x accum past an int (seen while writing the fuzz targets: it overflowed)
  TrainConfig r;
  r.train = "x", r.devices = "cpu,cpu", r.batch = 1 << 30, r.accum = 1 << 30;
  REQUIRE_ERROR(validate_config(r), "is not divisible by the 2 replicas of --devices cpu,cpu");
}

TEST_CASE("config: JSON round trip; unknown keys and wrong types are refused by name") {
  TrainConfig c;
  c.train = "a/train.txt", c.val = "a/test.txt", c.size = 32, c.channels = 3;
  c.mean = {0.1, 0.2, 0.3}, c.std = {0.4, 0.5, 0.6}, c.augment = true, c.pad = 4;
  c.optimizer = "adamw", c.lr = 0.003, c.seed = 0xfedcba9876543210ull, c.class_names = {"a", "b"};
  c.classes = 2, c.model_text = "conv 8 3x3\nlinear classes\n", c.limit_train = 5000;
  c.cuda_graph = true, c.max_skips = 7;
  const std::string text = config_to_json_text(c);
  const TrainConfig back = config_from_json_text(text, "config.json");
  REQUIRE(config_to_json_text(back) == text);
  REQUIRE(back.seed == c.seed);  // 64-bit seeds survive JSON
  REQUIRE(back.mean == c.mean);
  REQUIRE(back.model_text == c.model_text);
  REQUIRE(back.cuda_graph);
  REQUIRE(back.max_skips == 7);
  c.cuda_graph = false;  // --no-cuda-graph round trips too
  REQUIRE(!config_from_json_text(config_to_json_text(c), "config.json").cuda_graph);
  nlohmann::json old = c;  // a checkpoint from before the option: today's default, on (the
  old.erase("cuda_graph"); //   graphs give the launched step's bits)
  REQUIRE(config_from_json_text(old.dump(), "old.json").cuda_graph);

  nlohmann::json j = c;
  j["learning_rate"] = 0.1;
  REQUIRE_ERROR(config_from_json_text(j.dump(), "x.json"), "unknown key 'learning_rate'");
  j.erase("learning_rate");
  j["batch"] = "big";
  REQUIRE_ERROR(config_from_json_text(j.dump(), "x.json"), "configuration key 'batch'");
  REQUIRE_ERROR(config_from_json_text("{", "x.json"), "x.json: not valid JSON");
  REQUIRE(option_key("--label-smoothing") == "label_smoothing");
}

TEST_CASE("config: an integer key takes an integer of its type's range, nothing cast") {
  // (found by fuzz/: the JSON's numbers were cast, and 8.9e23 into the uint64 seed is
  // undefined behaviour)
  const auto with = [](const char* key, const nlohmann::json& v) {
    nlohmann::json j = TrainConfig();
    j[key] = v;
    return j.dump();
  };
  REQUIRE_ERROR(config_from_json_text(with("seed", 8.88889e23), "x.json"),
                "configuration key 'seed': 8.88889e+23 is not an integer in [0, 18446744073709551615]");
  REQUIRE_ERROR(config_from_json_text(with("seed", -1), "x.json"), "key 'seed': -1 is not");
  REQUIRE_ERROR(config_from_json_text(with("batch", 2.5), "x.json"),
                "key 'batch': 2.5 is not an integer in [-2147483648, 2147483647]");
  REQUIRE_ERROR(config_from_json_text(with("epochs", int64_t(1) << 40), "x.json"),
                "key 'epochs': 1099511627776 is not");
  REQUIRE_ERROR(config_from_json_text(with("limit_train", 1e300), "x.json"), "limit_train");
  REQUIRE(config_from_json_text(with("seed", uint64_t(-1)), "x.json").seed == uint64_t(-1));
  REQUIRE(config_from_json_text(with("batch", -3), "x.json").batch == -3);  // validate's job
  REQUIRE(config_from_json_text(with("lr", 1), "x.json").lr == 1);  // a float takes integers
}

TEST_CASE("config: a resumed run may change how long it runs, not what it computes") {
  TrainConfig saved;
  saved.train = "t.txt", saved.epochs = 5, saved.lr = 0.1;
  TrainConfig cli;
  cli.train = "t.txt", cli.epochs = 8, cli.lr = 0.1, cli.threads = 3;
  const TrainConfig r = resume_config(saved, cli, {"epochs", "threads", "lr", "train"});
  REQUIRE(r.epochs == 8);   // may change
  REQUIRE(r.threads == 3);
  REQUIRE(r.lr == 0.1);     // given, but equal to the saved value: fine
  cli.lr = 0.05;
  REQUIRE_ERROR(resume_config(saved, cli, {"lr"}), "--lr 0.05 differs from the checkpoint's 0.1");
  cli.lr = 0.1, cli.batch = 64;
  REQUIRE_ERROR(resume_config(saved, cli, {"batch"}), "--batch 64 differs");
  // Not given: the saved value stands even when the command line's default differs.
  REQUIRE(resume_config(saved, cli, {}).batch == saved.batch);
  // How the step is launched changes no result: a resumed run may switch the graph on or off.
  cli.batch = saved.batch, cli.cuda_graph = false;  // --no-cuda-graph
  REQUIRE(saved.cuda_graph);
  REQUIRE(!resume_config(saved, cli, {"cuda_graph"}).cuda_graph);
  TrainConfig off = saved;
  off.cuda_graph = false, cli.cuda_graph = true;  // --cuda-graph on a run that had it off
  REQUIRE(resume_config(off, cli, {"cuda_graph"}).cuda_graph);
  // The compute threads: the run's resolved count stands unless the command line gives one
  // (it changes oneDNN's rounding, not the reference kernels').
  saved.compute_threads = 3, cli.compute_threads = 0;
  REQUIRE(resume_config(saved, cli, {}).compute_threads == 3);
  cli.compute_threads = 1;
  REQUIRE(resume_config(saved, cli, {"compute_threads"}).compute_threads == 1);
}

TEST_CASE("config: --sync-bn is recorded with the run; a resumed run keeps it and refuses a switch") {
  TrainConfig saved;
  saved.sync_bn = true;
  REQUIRE(config_from_json_text(config_to_json_text(saved), "x.json").sync_bn);
  REQUIRE(!config_from_json_text(config_to_json_text(TrainConfig()), "x.json").sync_bn);
  TrainConfig cli;  // resumed without the flag: the checkpoint's setting stands
  REQUIRE(resume_config(saved, cli, {}).sync_bn);
  saved.sync_bn = false, cli.sync_bn = true;
  REQUIRE_ERROR(resume_config(saved, cli, {"sync_bn"}),
                "--sync-bn true differs from the checkpoint's false");
}

TEST_CASE("device: auto falls back to the CPU with one line saying why; cuda names what is missing") {
  const RunDevice a = choose_device("auto", "auto");
  if (gpu_usable()) {  // a CUDA build on a machine with a GPU: auto takes it, fp16
    REQUIRE(a.device == Device::cuda);
    REQUIRE(a.dtype == DType::f16);
    REQUIRE(a.notice.empty());
    return;
  }
  REQUIRE(a.device == Device::cpu);
  REQUIRE(a.dtype == DType::f32);
  REQUIRE(a.notice.rfind("cutrain: running on the CPU: ", 0) == 0);
  REQUIRE(a.notice.find('\n') == std::string::npos);
  REQUIRE(choose_device("cpu", "fp16").dtype == DType::f16);  // fp16 storage on the CPU: tests
  REQUIRE(choose_device("cpu", "auto").notice.empty());
  REQUIRE_ERROR(choose_device("cuda", "auto"), "--device cuda: ");
  REQUIRE_ERROR(choose_device("gpu", "auto"), "expected auto, cpu or cuda");
  REQUIRE_ERROR(choose_device("cpu", "bf16"), "expected auto, fp16 or fp32");
}

TEST_CASE("resolve_config: Fashion-MNIST JPEGs give 28x28x1, 10 named classes, measured mean/std") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TrainConfig c;
  c.train = fm.train, c.val = fm.test, c.augment = true, c.limit_train = 2000;
  resolve_config(c);
  REQUIRE(c.size == 28);
  REQUIRE(c.channels == 1);
  REQUIRE(c.classes == 10);
  REQUIRE(c.class_names == fashion_mnist_classes());
  REQUIRE(c.pad == 3);  // size / 8 with --augment
  REQUIRE(c.warmup == 1);
  REQUIRE(c.lr == 0.1);
  REQUIRE(c.wd == 5e-4);
  REQUIRE(c.model_text == builtin_model_text("default"));
  // Fashion-MNIST's well-known statistics: mean 0.2860, std 0.3530 (all 60,000 images).
  REQUIRE(c.mean.size() == 1);
  REQUIRE(std::abs(c.mean[0] - 0.286) < 0.01);
  REQUIRE(std::abs(c.std[0] - 0.353) < 0.01);
  // Resolving a resolved configuration changes nothing.
  TrainConfig again = c;
  resolve_config(again);
  REQUIRE(config_to_json_text(again) == config_to_json_text(c));

  REQUIRE(open_source(fm.train, eval_image_spec(c), 123)->size() == 123);
  REQUIRE(open_source(fm.train, eval_image_spec(c))->size() == 60000);
  REQUIRE(train_image_spec(c).random_crop);
  REQUIRE(!eval_image_spec(c).random_crop);

  c.model = "no-such-model", c.model_text.clear();
  REQUIRE_ERROR(resolve_config(c), "--model no-such-model: no such built-in model or file");
}

TEST_CASE("resolve_config: a pack gives its stored size, channels and class names") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  ImageList list = read_images(fm.test);
  list.samples.resize(300);
  PackOptions po;
  po.size = 28, po.channels = 1, po.threads = 2;
  write_pack(list, dir / "test.h5", po);
  REQUIRE(is_hdf5_file(dir / "test.h5"));
  REQUIRE(!is_hdf5_file(fm.test));
  TrainConfig c;
  c.train = dir / "test.h5";
  resolve_config(c);
  REQUIRE((c.size == 28 && c.channels == 1 && c.classes == 10));
  REQUIRE(c.class_names == fashion_mnist_classes());
  REQUIRE(open_source(c.train, eval_image_spec(c), 50)->size() == 50);
}

TEST_CASE("config: the optimizer's defaults fill lr, wd and warmup when left at auto") {
  TrainConfig c;
  c.optimizer = "adamw", c.schedule = "onecycle";
  resolve_defaults(c);
  REQUIRE(c.lr == 1e-3);
  REQUIRE(c.wd == 0.05);
  REQUIRE(c.warmup == 0);  // onecycle's warm-up is part of the preset
  TrainConfig d;
  d.lr = 0.02, d.wd = 0, d.warmup = 2.5;  // given: kept
  resolve_defaults(d);
  REQUIRE((d.lr == 0.02 && d.wd == 0 && d.warmup == 2.5));
}
