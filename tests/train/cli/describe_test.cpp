// `cutrain describe --json` (train/cli/describe.h): what bench/torch_reference.py rebuilds a model
// from. Every field it reads is checked here against the model itself.
#include <nlohmann/json.hpp>

#include "nn/model.h"
#include "tests/test_util.h"
#include "train/cli/describe.h"

using namespace cutrain;
using nlohmann::json;

namespace {

json describe(const std::string& name, int H, int W, int C, int classes) {
  ModelOptions o;
  o.H = H, o.W = W, o.C = C, o.classes = classes;
  return json::parse(model_json(*build_model(load_model_spec(name), o)));
}

// The sum of the "params" of a list of rows.
int64_t params_sum(const json& rows) {
  int64_t n = 0;
  for (const json& r : rows) n += r["params"].get<int64_t>();
  return n;
}

}  // namespace

TEST_CASE("describe --json: the default model, layer by layer") {
  const json j = describe("default", 28, 28, 1, 10);
  REQUIRE(j["model"] == "default");
  REQUIRE(j["input"] == json::array({28, 28, 1}));
  REQUIRE(j["classes"] == 10);
  REQUIRE(j["params"] == 140458);
  REQUIRE(params_sum(j["layers"]) == 140458);
  const json& layers = j["layers"];
  REQUIRE(layers.size() == 19);  // one per line of the description
  const json& conv1 = layers[0];
  REQUIRE(conv1["name"] == "conv1");
  REQUIRE(conv1["kind"] == "conv");
  REQUIRE(conv1["out"] == 32);
  REQUIRE(conv1["R"] == 3);
  REQUIRE(conv1["S"] == 3);
  REQUIRE(conv1["stride"] == json::array({1, 1}));
  REQUIRE(conv1["pad"] == json::array({1, 1}));
  REQUIRE(conv1["bias"] == false);
  REQUIRE(conv1["shape"] == json::array({28, 28, 32}));
  REQUIRE(conv1["params"] == 32 * 3 * 3 * 1);
  REQUIRE(layers[6]["kind"] == "maxpool");
  REQUIRE(layers[6]["stride"] == json::array({2, 2}));  // the default: the window
  REQUIRE(layers[6]["shape"] == json::array({14, 14, 32}));
  REQUIRE(layers[17]["kind"] == "gap");
  REQUIRE(layers[17]["shape"] == json::array({128}));
  const json& fc = layers[18];
  REQUIRE(fc["kind"] == "linear");
  REQUIRE(fc["out"] == 10);  // 'linear classes', resolved
  REQUIRE(fc["bias"] == true);
  REQUIRE(fc["params"] == 128 * 10 + 10);

  // The parameters in optimizer order, cutrain's layouts: conv (K,R,S,C), linear (K,C).
  const json& p = j["parameters"];
  REQUIRE(p[0]["name"] == "conv1.w");
  REQUIRE(p[0]["shape"] == json::array({32, 3, 3, 1}));
  REQUIRE(p[1]["name"] == "bn1.gamma");
  REQUIRE(p.back()["name"] == "linear1.b");
  REQUIRE(p[p.size() - 2]["shape"] == json::array({10, 128}));
  int64_t n = 0;
  for (const json& q : p) {
    int64_t e = 1;
    for (int d : q["shape"]) e *= d;
    n += e;
  }
  REQUIRE(n == 140458);
  // The description, one canonical line per layer: parsing it again gives the same model.
  REQUIRE(parse_model_spec(j["model_text"], "again").layers ==
          load_model_spec("default").layers);
}

TEST_CASE("describe --json: a resblock lists its parts, with the projection shortcut") {
  const json j = describe("resnet", 32, 32, 3, 100);
  REQUIRE(j["params"] == 696042 + 576 + 129 * 90);  // 3 input channels; 100 classes
  const json& layers = j["layers"];
  REQUIRE(params_sum(layers) == j["params"].get<int64_t>());
  const json& block3 = layers[5];  // resblock 64 stride=2
  REQUIRE(block3["name"] == "block3");
  REQUIRE(block3["kind"] == "resblock");
  REQUIRE(block3["out"] == 64);
  REQUIRE(block3["stride"] == json::array({2, 2}));
  REQUIRE(block3["shape"] == json::array({16, 16, 64}));
  const json& parts = block3["parts"];
  REQUIRE(parts.size() == 7);  // conv1 bn1 relu1 conv2 bn2 shortcut shortcut_bn
  REQUIRE(params_sum(parts) == block3["params"].get<int64_t>());
  REQUIRE(parts[0]["name"] == "block3.conv1");
  REQUIRE(parts[0]["stride"] == json::array({2, 2}));
  REQUIRE(parts[5]["name"] == "block3.shortcut");
  REQUIRE(parts[5]["R"] == 1);
  REQUIRE(parts[5]["pad"] == json::array({0, 0}));
  REQUIRE(layers[4]["parts"].size() == 5);  // block2: same shape in and out, no shortcut
}
