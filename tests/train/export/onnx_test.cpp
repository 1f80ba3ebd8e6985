// cutrain export (train/export/onnx_export.h): the graph's structure read back with ONNX's own
// classes, the refusals; then the real client: models trained on real Fashion-MNIST images,
// exported, and run by onnxruntime on 1,000 test images (tests/train/export/onnx_client.py), which
// must give `cutrain predict`'s top-1 for every image and its probabilities within 1e-5.
//
// The images go to cutrain as PGM files (lossless) written from the IDX files of the Debian
// package, and to onnxruntime straight from those IDX files: both see the same pixels, and
// no JPEG decoder's rounding stands between them.
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "kernels/check.h"
#include "nn/model.h"
#include "tests/train/cli_fixture.h"
#include "train/export/onnx_export.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

const char* kAllLayers = R"(# every kind of layer, with the options that change the graph
conv 12 3x5 stride=2x1 pad=1x2 bias
relu
maxpool 3x2 stride=2x1 pad=1x0
resblock 16 stride=2
conv 8 1x1
bn
flatten
linear 24 nobias
flatten
bn
relu
linear classes
)";

std::map<std::string, std::string> metadata(const onnx::ModelProto& m) {
  std::map<std::string, std::string> out;
  for (const auto& p : m.metadata_props()) out[p.key()] = p.value();
  return out;
}

const onnx::TensorProto* initializer(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

// The INTS attributes of the node named `name`.
std::map<std::string, std::vector<int64_t>> int_attributes(const onnx::ModelProto& m,
                                                           const std::string& name) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& n : m.graph().node())
    if (n.name() == name)
      for (const auto& a : n.attribute()) out[a.name()] = {a.ints().begin(), a.ints().end()};
  return out;
}

std::string ops(const onnx::ModelProto& m) {
  std::string s;
  for (const auto& n : m.graph().node()) s += (s.empty() ? "" : " ") + n.op_type();
  return s;
}

}  // namespace

TEST_CASE("onnx export: every layer kind as ONNX nodes, weights in ONNX's layout, metadata") {
  ModelOptions mo;
  mo.H = mo.W = 28;
  mo.C = 3;
  mo.classes = 4;
  mo.seed = 7;
  const auto model = build_model(parse_model_spec(kAllLayers, "all.model"), mo);
  OnnxOptions o;
  o.mean = {0.1, 0.2, 0.3};
  o.std = {0.5, 0.25, 0.125};
  o.class_names = {"a", "b, with a comma", "c", "d"};
  o.metadata = {{"step", "12"}};
  const OnnxGraph g = onnx_model(*model, o);
  onnx::ModelProto m;
  REQUIRE(m.ParseFromString(g.bytes));

  REQUIRE(m.opset_import(0).version() == 13);
  REQUIRE(ops(m) ==
        "Cast Div Sub Div Transpose "                         // uint8 NHWC -> normalised NCHW
        "Conv Relu MaxPool "                                  // conv1 relu1 pool1
        "Conv BatchNormalization Relu Conv BatchNormalization "  // block1
        "Conv BatchNormalization Add Relu "                   // its projection shortcut
        "Conv BatchNormalization Transpose Flatten "          // conv2 bn1, flatten in NHWC order
        "Gemm Identity BatchNormalization Relu Gemm Identity");  // linear1, flatten of a vector,
                                                              // bn2 relu linear2, the output
  REQUIRE(g.nodes == m.graph().node_size());
  // the BN running statistics (block1: bn1, bn2, shortcut_bn; bn1, bn2), 255, mean and std
  REQUIRE(g.parameters == model->parameter_count() + 2 * (16 + 16 + 16 + 8 + 24) + 1 + 3 + 3);
  REQUIRE(g.input == "image uint8 (N,28,28,3)");
  REQUIRE(g.output == "logits float (N,4)");
  const auto& in = m.graph().input(0).type().tensor_type();
  REQUIRE(in.elem_type() == onnx::TensorProto::UINT8);
  REQUIRE(in.shape().dim(0).dim_param() == "N");
  REQUIRE(m.graph().output(0).name() == "logits");

  // conv1.w: cutrain's (K,R,S,C) as ONNX's (K,C,R,S); pads and strides as (H,W)
  REQUIRE(initializer(m, "conv1.w"));
  const onnx::TensorProto& w = *initializer(m, "conv1.w");
  REQUIRE(w.dims_size() == 4);
  REQUIRE((w.dims(0) == 12 && w.dims(1) == 3 && w.dims(2) == 3 && w.dims(3) == 5));
  using Ints = std::map<std::string, std::vector<int64_t>>;
  REQUIRE(int_attributes(m, "conv1") ==  // pads: top, left, bottom, right
          Ints{{"kernel_shape", {3, 5}}, {"strides", {2, 1}}, {"pads", {1, 2, 1, 2}}});
  REQUIRE(int_attributes(m, "pool1") ==
          Ints{{"kernel_shape", {3, 2}}, {"strides", {2, 1}}, {"pads", {1, 0, 1, 0}}});
  std::vector<float> oihw(w.raw_data().size() / 4);
  std::memcpy(oihw.data(), w.raw_data().data(), w.raw_data().size());
  const std::vector<float> krsc = model->parameters()[0]->value.to_floats();
  for (int k : {0, 5, 11})
    for (int r = 0; r < 3; r++)
      for (int s = 0; s < 5; s++)
        for (int c = 0; c < 3; c++)
          REQUIRE(oihw[size_t(((k * 3 + c) * 3 + r) * 5 + s)] ==
                  krsc[size_t(((k * 3 + r) * 5 + s) * 3 + c)]);
  REQUIRE(initializer(m, "conv1.b"));
  REQUIRE(initializer(m, "conv1.b")->dims(0) == 12);
  REQUIRE(initializer(m, "linear1.b") == nullptr);  // 'nobias'

  const auto meta = metadata(m);
  REQUIRE(nlohmann::json::parse(meta.at("class_names")) ==
        nlohmann::json({"a", "b, with a comma", "c", "d"}));
  REQUIRE(nlohmann::json::parse(meta.at("mean")) == nlohmann::json({0.1, 0.2, 0.3}));
  REQUIRE(meta.at("step") == "12");

  SUBCASE("float input, softmax output") {
    o.input = OnnxInput::unit_float;
    o.softmax = true;
    onnx::ModelProto f;
    REQUIRE(f.ParseFromString(onnx_model(*model, o).bytes));
    REQUIRE(ops(f).rfind("Sub Div Transpose Conv", 0) == 0);  // no Cast, no Div by 255
    REQUIRE(f.graph().input(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT);
    REQUIRE(f.graph().output(0).name() == "probabilities");
    REQUIRE(f.graph().node(f.graph().node_size() - 1).op_type() == "Softmax");
  }
  SUBCASE("test-time flips: the mirror images beside the images, the two logits averaged") {
    o.tta_flip = true;
    onnx::ModelProto f;
    REQUIRE(f.ParseFromString(onnx_model(*model, o).bytes));
    REQUIRE(ops(f).rfind("Cast Div Sub Div Transpose Slice Concat Conv", 0) == 0);
    const std::string all = ops(f), tail = "Gemm Reshape ReduceMean Identity";
    REQUIRE(all.size() > tail.size());
    REQUIRE(all.substr(all.size() - tail.size()) == tail);
    REQUIRE(int_attributes(f, "image.mirror").empty());  // its indices are inputs in opset 13
    REQUIRE(int_attributes(f, "mirror.mean").at("axes") == std::vector<int64_t>{0});
    REQUIRE(metadata(f).at("output").find("mirror image") != std::string::npos);
  }
}

TEST_CASE("onnx export: refusals name what is wrong") {
  ModelOptions mo;
  mo.C = 1;
  const auto model = build_model(load_model_spec("default"), mo);
  OnnxOptions o;
  o.mean = {0.3, 0.3, 0.3};
  o.std = {0.3};
  REQUIRE_ERROR(onnx_model(*model, o), "one mean and one std per channel (1), got 3 and 1");
  o.mean = {0.3};
  o.std = {0};
  REQUIRE_ERROR(onnx_model(*model, o), "a std must be finite and > 0");
  o.std = {0.3};
  o.class_names = {"only one"};
  REQUIRE_ERROR(onnx_model(*model, o), "1 class names for 10 classes");
  REQUIRE_THROWS_AS(parse_onnx_input("int8"), UserError);
}

// ---- the real client -----------------------------------------------------------------------

namespace {

// The project's virtual environment with onnxruntime (make deps); "" with the reason in
// `why` when it is not there.
std::string onnx_python(std::string& why) {
  const fs::path py = repo_root() / ".venv" / "bin" / "python";
  if (!fs::exists(py)) {
    why = py.string() + " is missing: `make deps` makes it (onnxruntime, onnx, numpy from PyPI)";
  } else if (std::system(("'" + py.string() + "' -c 'import onnxruntime, onnx, numpy' 2>/dev/null")
                             .c_str()) != 0) {
    why = py.string() + " lacks onnxruntime, onnx or numpy: `make deps` could not install them";
  } else {
    return py.string();
  }
  const fs::path log = repo_root() / ".venv" / "pip.log";
  if (fs::exists(log))
    why += " (" + log.string() + ": " + read_text(log.string()).substr(0, 300) + ")";
  return "";
}

// n Fashion-MNIST images of a split from the IDX files, as PGM files with a list and
// classes.txt; returns the list's path.
std::string write_pgm_list(const fs::path& dir, const std::string& prefix, int n) {
  const std::string idx = fashion_mnist_idx_dir() + "/" + prefix;
  REQUIRE_MESSAGE(fs::exists(idx + "-images-idx3-ubyte.gz"),
                  idx << "-images-idx3-ubyte.gz is missing: install dataset-fashion-mnist");
  const IdxDataset d =
      read_idx_dataset(idx + "-images-idx3-ubyte.gz", idx + "-labels-idx1-ubyte.gz");
  REQUIRE(d.images.N >= n);
  fs::create_directories(dir / prefix);
  std::ofstream list(dir / (prefix + ".txt"));
  for (int i = 0; i < n; i++) {
    char name[32];
    std::snprintf(name, sizeof name, "%s/%05d.pgm", prefix.c_str(), i);
    std::ofstream f(dir / name, std::ios::binary);
    f << "P5\n" << d.images.W << " " << d.images.H << "\n255\n";
    f.write(reinterpret_cast<const char*>(d.images.image(i)), d.images.H * d.images.W);
    list << name << " " << int(d.labels[size_t(i)]) << "\n";
  }
  std::ofstream classes(dir / "classes.txt");
  for (const std::string& c : fashion_mnist_classes()) classes << c << "\n";
  return (dir / (prefix + ".txt")).string();
}

// Trains `train_args`, exports with `export_args`, predicts the 1,000 test images to a CSV
// and runs the client on them.
void check_against_onnxruntime(const std::vector<std::string>& train_args,
                               const std::vector<std::string>& export_args, int channels,
                               const std::string& weights = "the weights") {
  std::string why;
  const std::string python = onnx_python(why);
  if (python.empty()) return skip(why);
  TempDir dir;
  const fs::path d = dir.path();
  const std::string train = write_pgm_list(d, "train", 512);
  const std::string test = write_pgm_list(d, "t10k", 1000);
  const std::string run = (d / "run").string(), onnx = (d / "model.onnx").string(),
                    csv = (d / "predict.csv").string();

  std::vector<std::string> args = {"train", "--train", train, "--out", run, "--epochs", "1",
                                   "--batch", "64", "--device", "cpu", "--threads", "2"};
  args.insert(args.end(), train_args.begin(), train_args.end());
  Ran r = run_cutrain(args, (d / "train.log").string());
  REQUIRE_MESSAGE(r.status == 0, r.output);

  args = {"export", "--checkpoint", run, "--onnx", onnx};
  args.insert(args.end(), export_args.begin(), export_args.end());
  r = run_cutrain(args, (d / "export.log").string());
  REQUIRE_MESSAGE(r.status == 0, r.output);
  REQUIRE(r.output.find("checked by ONNX's checker and shape inference") != std::string::npos);
  REQUIRE(r.output.find(", " + weights + ";") != std::string::npos);

  r = run_cutrain({"predict", "--checkpoint", run, "--list", test, "--csv", csv, "--device",
                   "cpu", "--precision", "fp32", "--top", "1"},
                  (d / "predict.log").string());
  REQUIRE_MESSAGE(r.status == 0, r.output);
  REQUIRE(r.output.find(", " + weights + ";") != std::string::npos);

  r = run_process({python, (repo_root() / "tests/train/export/onnx_client.py").string(), "--model",
                   onnx, "--idx", fashion_mnist_idx_dir() + "/t10k-images-idx3-ubyte.gz",
                   "--predictions", csv, "--channels", std::to_string(channels)},
                  (d / "client.log").string());
  MESSAGE(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("top-1 identical for 1000 of 1000 images") != std::string::npos);
  REQUIRE(r.output.find("ONNX AGREES") != std::string::npos);
}

}  // namespace

TEST_CASE("onnx export: onnxruntime gives cutrain predict's top-1 and probabilities on 1,000 "
          "Fashion-MNIST test images: default model, uint8 input, softmax output") {
  check_against_onnxruntime({}, {"--softmax"}, 1);
}

TEST_CASE("onnx export: a run trained in fp16 exports its fp32 master weights, which "
          "onnxruntime runs as cutrain predict does") {
  check_against_onnxruntime({"--precision", "fp16"}, {}, 1);
}

TEST_CASE("onnx export: a run with --ema and --tta flip exports its average and its flips, "
          "which onnxruntime runs as cutrain predict does") {
  // export and predict both follow the checkpoint (--weights auto, --tta run)
  check_against_onnxruntime({"--ema", "0.9", "--tta", "flip"}, {"--softmax"}, 1,
                            "the weights' moving average");
}

TEST_CASE("onnx export: onnxruntime agrees on a resnet with 3 channels of their own "
          "normalisation, float input, logits output") {
  check_against_onnxruntime({"--model", "resnet", "--channels", "3", "--mean", "0.28,0.29,0.3",
                             "--std", "0.35,0.36,0.37"},
                            {"--input", "float"}, 3);
}

TEST_CASE("onnx export: onnxruntime agrees on a model of every layer kind (conv with bias, "
          "unequal sides, strides and pads, padded maxpool, flatten, BatchNorm after a linear "
          "layer)") {
  TempDir dir;
  const std::string model = (dir.path() / "all.model").string();
  std::ofstream(model) << kAllLayers;
  check_against_onnxruntime({"--model", model}, {}, 1);
}

TEST_CASE("cutrain export: a missing checkpoint and a bad --input are refused with exit 2") {
  TempDir dir;
  const std::string log = (dir.path() / "log").string();
  const std::string onnx = (dir.path() / "m.onnx").string();
  Ran r = run_cutrain({"export", "--checkpoint", (dir.path() / "nothing").string(), "--onnx",
                       onnx}, log);
  REQUIRE(r.status == 2);
  REQUIRE(r.output.find("no such file or folder") != std::string::npos);
  r = run_cutrain({"export", "--checkpoint", dir.path().string(), "--onnx", onnx, "--input",
                   "int8"}, log);
  REQUIRE(r.status == 2);
  REQUIRE(r.output.find("--input") != std::string::npos);
  REQUIRE_FALSE(fs::exists(dir.path() / "m.onnx"));
}
