// The model description format: every layer kind and option, comments, line numbers, the
// canonical form, and the errors (each names the source and the line).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>  // getpid

#include "nn/model_spec.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("model spec: every layer kind with its options") {
  const ModelSpec spec = parse_model_spec(
      "conv 32 3x3\n"
      "conv 16 5x3 stride=2 pad=1x2 bias\n"
      "conv 8 1x1 stride=2x3 pad=0\n"
      "bn\n"
      "relu\n"
      "maxpool 2x2\n"
      "maxpool 3x3 stride=2 pad=1\n"
      "gap\n"
      "flatten\n"
      "linear 100\n"
      "linear classes nobias\n"
      "resblock 64\n"
      "resblock 128 stride=2\n",
      "all.model");
  REQUIRE(spec.source == "all.model");
  REQUIRE(spec.layers.size() == 13);
  const auto& L = spec.layers;

  REQUIRE(L[0].kind == LayerKind::conv);
  REQUIRE(L[0].out == 32);
  REQUIRE((L[0].R == 3 && L[0].S == 3));
  REQUIRE((L[0].stride_h == 1 && L[0].stride_w == 1 && L[0].pad_h == 0 && L[0].pad_w == 0));
  REQUIRE(!L[0].bias);

  REQUIRE((L[1].out == 16 && L[1].R == 5 && L[1].S == 3));
  REQUIRE((L[1].stride_h == 2 && L[1].stride_w == 2));  // stride=N means NxN
  REQUIRE((L[1].pad_h == 1 && L[1].pad_w == 2));
  REQUIRE(L[1].bias);

  REQUIRE((L[2].stride_h == 2 && L[2].stride_w == 3 && L[2].pad_h == 0 && L[2].pad_w == 0));

  REQUIRE(L[3].kind == LayerKind::bn);
  REQUIRE(L[4].kind == LayerKind::relu);

  REQUIRE(L[5].kind == LayerKind::maxpool);
  REQUIRE((L[5].R == 2 && L[5].S == 2));
  REQUIRE((L[5].stride_h == 2 && L[5].stride_w == 2));  // stride defaults to the window
  REQUIRE((L[6].R == 3 && L[6].stride_h == 2 && L[6].pad_h == 1 && L[6].pad_w == 1));

  REQUIRE(L[7].kind == LayerKind::gap);
  REQUIRE(L[8].kind == LayerKind::flatten);

  REQUIRE(L[9].kind == LayerKind::linear);
  REQUIRE((L[9].out == 100 && !L[9].out_is_classes && L[9].bias));
  REQUIRE((L[10].out_is_classes && !L[10].bias));

  REQUIRE(L[11].kind == LayerKind::resblock);
  REQUIRE((L[11].out == 64 && L[11].stride_h == 1));
  REQUIRE((L[12].out == 128 && L[12].stride_h == 2 && L[12].stride_w == 2));

  for (size_t i = 0; i < L.size(); i++) REQUIRE(L[i].line == int(i) + 1);
}

TEST_CASE("model spec: comments, blank lines and spacing; lines keep their numbers") {
  const ModelSpec spec = parse_model_spec(
      "# a comment line\n"
      "\n"
      "   conv   8\t3x3   pad=1   # trailing comment\n"
      "    \n"
      "relu#no space before the comment\n"
      "# conv 8 3x3 (commented out)\n"
      "gap",  // no newline at the end
      "c.model");
  REQUIRE(spec.layers.size() == 3);
  REQUIRE(spec.layers[0].kind == LayerKind::conv);
  REQUIRE(spec.layers[0].pad_h == 1);
  REQUIRE(spec.layers[0].line == 3);
  REQUIRE(spec.layers[1].kind == LayerKind::relu);
  REQUIRE(spec.layers[1].line == 5);
  REQUIRE(spec.layers[2].kind == LayerKind::gap);
  REQUIRE(spec.layers[2].line == 7);
  REQUIRE(spec.where(spec.layers[1]) == "c.model:5");
}

TEST_CASE("model spec: the canonical form parses back to the same layer") {
  const char* lines[] = {"conv 32 3x3",         "conv 16 5x3 stride=2 pad=1x2 bias",
                         "conv 8 1x1 stride=2x3", "bn", "relu", "maxpool 2x2",
                         "maxpool 3x3 stride=2 pad=1", "maxpool 2x2 stride=1",
                         "gap", "flatten", "linear 100", "linear classes nobias",
                         "resblock 64", "resblock 128 stride=2"};
  for (const char* line : lines) {
    INFO(line);
    const LayerSpec l = parse_model_spec(line, "t").layers.at(0);
    REQUIRE(layer_spec_str(l) == line);
    REQUIRE(parse_model_spec(layer_spec_str(l), "t").layers.at(0) == l);
  }
  // a non-canonical spelling comes out canonical
  REQUIRE(layer_spec_str(parse_model_spec("conv 4 3x3 pad=1x1 stride=1", "t").layers[0]) ==
          "conv 4 3x3 pad=1");
}

TEST_CASE("model spec: errors name the source and the line") {
  auto parse = [](const std::string& text) { return parse_model_spec(text, "my.model"); };
  // unknown layer, with the known ones listed
  REQUIRE_ERROR(parse("conv 8 3x3\nbn\nconvv 8 3x3\n"), "my.model:3: unknown layer 'convv'");
  REQUIRE_ERROR(parse("convv"), "layers: conv, bn, relu, maxpool, gap, flatten, linear, resblock");
  // missing and malformed sizes
  REQUIRE_ERROR(parse("# x\n\nconv 32\n"), "my.model:3: conv needs a filter size like 3x3");
  REQUIRE_ERROR(parse("conv 32 3x\n"), "my.model:1: conv: bad filter size '3x'");
  REQUIRE_ERROR(parse("conv 32 3\n"), "conv: bad filter size '3'");
  REQUIRE_ERROR(parse("conv 32 0x3\n"), "conv: bad filter size '0x3'");
  REQUIRE_ERROR(parse("conv 32 3x3x3\n"), "conv: bad filter size '3x3x3'");
  REQUIRE_ERROR(parse("relu\nmaxpool\n"), "my.model:2: maxpool needs a filter size like 3x3");
  REQUIRE_ERROR(parse("conv\n"), "my.model:1: conv needs an output channel count");
  REQUIRE_ERROR(parse("conv 3x3 32\n"), "conv: bad channel count '3x3'");
  REQUIRE_ERROR(parse("conv 0 3x3\n"), "conv: bad channel count '0'");
  REQUIRE_ERROR(parse("conv 99999999 3x3\n"), "conv: bad channel count '99999999'");
  REQUIRE_ERROR(parse("linear\n"), "linear needs an output channel count");
  REQUIRE_ERROR(parse("resblock\n"), "resblock needs an output channel count");
  // bad option values
  REQUIRE_ERROR(parse("conv 8 3x3 stride=0\n"), "my.model:1: conv: bad value stride='0'");
  REQUIRE_ERROR(parse("conv 8 3x3 stride=\n"), "conv: bad value stride=''");
  REQUIRE_ERROR(parse("conv 8 3x3 pad=-1\n"), "conv: bad value pad='-1'");
  REQUIRE_ERROR(parse("conv 8 3x3 pad=one\n"), "conv: bad value pad='one'");
  REQUIRE_ERROR(parse("maxpool 2x2 stride=2x\n"), "maxpool: bad value stride='2x'");
  REQUIRE_ERROR(parse("resblock 64 stride=2x2\n"), "resblock: bad value stride='2x2'");
  REQUIRE_ERROR(parse("conv 8 3x3 pad=1 pad=2\n"), "my.model:1: option 'pad' given twice");
  // unknown options and extra arguments
  REQUIRE_ERROR(parse("bn\nconv 8 3x3 strid=2\n"), "my.model:2: unknown option 'strid=2' for conv");
  REQUIRE_ERROR(parse("conv 8 3x3 nobias\n"), "unknown option 'nobias' for conv");
  REQUIRE_ERROR(parse("linear 10 bias\n"), "unknown option 'bias' for linear");
  REQUIRE_ERROR(parse("conv 8 3x3 bias bias\n"), "'bias' given twice");
  REQUIRE_ERROR(parse("resblock 64 pad=1\n"), "unknown option 'pad=1' for resblock");
  REQUIRE_ERROR(parse("relu 3\n"), "my.model:1: unexpected argument '3' for relu");
  REQUIRE_ERROR(parse("gap now\n"), "unknown option 'now' for gap");
  REQUIRE_ERROR(parse("conv 8 3x3 3x3\n"), "unexpected argument '3x3' for conv");
  REQUIRE_ERROR(parse("linear classes 10\n"), "unexpected argument '10' for linear");
  REQUIRE_ERROR(parse("linear 10 classes\n"), "unexpected argument 'classes' for linear");
  // messages carry the usage line of the layer
  REQUIRE_ERROR(parse("conv 8 3x3 x=1\n"), "usage: conv K RxS [stride=N|NxM] [pad=N|NxM] [bias]");
  // nothing to build
  REQUIRE_ERROR(parse("# only a comment\n\n"), "my.model: the description has no layers");
}

TEST_CASE("model spec: built-in names, files, and unknown names") {
  const std::vector<std::string> names = builtin_model_names();
  REQUIRE(names == std::vector<std::string>{"default", "resnet"});
  for (const std::string& name : names) {
    const ModelSpec s = load_model_spec(name);
    REQUIRE(s.source == name);
    REQUIRE(!s.layers.empty());
    REQUIRE(s.layers.back().kind == LayerKind::linear);
    REQUIRE(s.layers.back().out_is_classes);
  }
  REQUIRE_ERROR(builtin_model_text("vgg"),
                "unknown built-in model 'vgg' (built-in: default, resnet)");
  REQUIRE_ERROR(load_model_spec("no/such/model.txt"),
                "unknown model 'no/such/model.txt': not a built-in model (default, resnet)");

  // A file: parsed, and its path names it in messages.
  const auto path = std::filesystem::temp_directory_path() /
                    ("cutrain_model_spec_test_" + std::to_string(::getpid()) + ".model");
  {
    std::ofstream f(path);
    f << "# tiny\nconv 4 3x3\ngap\nlinear classes\n";
  }
  const ModelSpec s = load_model_spec(path.string());
  REQUIRE(s.source == path.string());
  REQUIRE(s.layers.size() == 3);
  REQUIRE(s.layers[0].line == 2);
  {
    std::ofstream f(path);
    f << "conv 4 3x3\nlinaer classes\n";
  }
  REQUIRE_ERROR(load_model_spec(path.string()), path.string() + ":2: unknown layer 'linaer'");
  std::filesystem::remove(path);
}
