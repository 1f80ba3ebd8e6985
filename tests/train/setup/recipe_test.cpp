// --recipe (train/setup/recipe.h): a recipe's values under the options given on the command
// line (and through `cutrain train` itself, into config.json), the built-in recipes valid
// configurations, and the mistakes a recipe can hold refused with the recipe and the key named.
#include <fstream>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/fashion_mnist_data.h"
#include "train/setup/config.h"
#include "train/setup/recipe.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {
std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir / name;
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST_CASE("apply_recipe: the recipe's values, except where an option was given") {
  TempDir dir;
  TrainConfig cli;
  cli.recipe = write(dir, "r.json", R"({"epochs": 17, "augment": true, "ema": 0.99,
                                        "label_smoothing": 0.05, "lr": 0.2})");
  cli.lr = 0.3;  // given on the command line
  cli.train = "data/train.txt";
  const TrainConfig c = apply_recipe(cli, {"lr", "train", "recipe"});
  REQUIRE(c.epochs == 17);
  REQUIRE(c.augment);
  REQUIRE(c.ema == 0.99);
  REQUIRE(c.label_smoothing == 0.05);
  REQUIRE(c.lr == 0.3);  // explicit wins
  REQUIRE(c.train == "data/train.txt");
  REQUIRE(c.recipe == cli.recipe);  // config.json names it
  // no recipe: nothing changes
  TrainConfig none;
  none.epochs = 3;
  REQUIRE(apply_recipe(none, {}).epochs == 3);
}

TEST_CASE("the built-in recipes are valid configurations") {
  REQUIRE(!recipe_names().empty());
  for (const std::string& name : recipe_names()) {
    INFO(name);
    TrainConfig cli;
    cli.recipe = name;
    cli.train = "train.txt";
    const TrainConfig c = apply_recipe(cli, {"train", "recipe"});
    validate_config(c);
    REQUIRE(config_to_json_text(c) != config_to_json_text(TrainConfig{}));  // it sets something
  }
}

TEST_CASE("apply_recipe: unknown recipes, keys, types and keys a recipe may not set, named") {
  TempDir dir;
  TrainConfig cli;
  cli.recipe = "fashion";
  REQUIRE_ERROR(apply_recipe(cli, {}), "no such recipe (built in: fmnist");
  cli.recipe = dir / "missing.json";
  REQUIRE_ERROR(apply_recipe(cli, {}), "cannot read the file");
  cli.recipe = write(dir, "bad.json", "{\"epochs\": ");
  REQUIRE_ERROR(apply_recipe(cli, {}), "not valid JSON");
  cli.recipe = write(dir, "list.json", "[1, 2]");
  REQUIRE_ERROR(apply_recipe(cli, {}), "a recipe is a JSON object");
  cli.recipe = write(dir, "typo.json", R"({"epoch": 3})");
  REQUIRE_ERROR(apply_recipe(cli, {}), "'epoch' is not an option");
  cli.recipe = write(dir, "data.json", R"({"train": "elsewhere.txt"})");
  REQUIRE_ERROR(apply_recipe(cli, {}), "'train' is not the recipe's to set");
  cli.recipe = write(dir, "out.json", R"({"out": "runs/x"})");
  REQUIRE_ERROR(apply_recipe(cli, {}), "'out' is not the recipe's to set");
  cli.recipe = write(dir, "type.json", R"({"epochs": "many"})");
  REQUIRE_ERROR(apply_recipe(cli, {}), "type.json: configuration key 'epochs'");
}

TEST_CASE("cutrain train --recipe: config.json holds the recipe's values, the options given win") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  const std::string recipe = write(dir, "mine.json", R"({"epochs": 3, "label_smoothing": 0.05,
                                                         "ema": 0.9, "batch": 32})");
  const std::string out = dir / "run";
  const Ran r = run_cutrain({"train", "--train", fm.train, "--limit-train", "64", "--model",
                             "default", "--device", "cpu", "--threads", "1", "--recipe", recipe,
                             "--epochs", "1", "--out", out},
                            dir / "train.log");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  REQUIRE(r.output.find("recipe " + recipe + ": its options") != std::string::npos);
  const TrainConfig c = config_from_json_text(read_text(out + "/config.json"), "config.json");
  REQUIRE(c.recipe == recipe);
  REQUIRE(c.epochs == 1);  // given: the command line's
  REQUIRE(c.label_smoothing == 0.05);
  REQUIRE(c.ema == 0.9);
  REQUIRE(c.batch == 32);
  // a recipe that may not set what it sets: exit 2, the key named
  const std::string bad = write(dir, "bad.json", R"({"out": "elsewhere"})");
  const Ran b = run_cutrain({"train", "--train", fm.train, "--recipe", bad, "--out", out + "2"},
                            dir / "bad.log");
  REQUIRE(b.status == 2);
  REQUIRE(b.output.find("'out' is not the recipe's to set") != std::string::npos);
}
