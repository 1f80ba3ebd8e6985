// The training recipes (see recipe.h).
#include "train/setup/recipe.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain {

namespace {

// The built-in recipes. Each one's numbers come from a search on a held-out split of the
// training set (never the test set), recorded with every recipe tried; the comment says where.
const std::map<std::string, std::string>& builtins() {
  static const std::map<std::string, std::string> recipes = {
      // Fashion-MNIST, the default model: a peak rate of 0.2 (not 0.1), no label smoothing (not
      // 0.1), a moving average of the weights (0.99), the default 10 epochs (the 10-second
      // budget on one GPU). Each helped on the held-out split, alone and together, at 5 and at
      // 15 epochs; flips, augmentation and a larger batch did not
      // (bench/results/recipe-fmnist-2026-11-29.md).
      {"fmnist", R"({"lr": 0.2, "label_smoothing": 0, "ema": 0.99})"},
  };
  return recipes;
}

// What a recipe may not set: the data, where the results go, and how the process runs.
const std::set<std::string>& refused_keys() {
  static const std::set<std::string> keys = {
      "train", "val", "val_split", "csv_columns", "limit_train", "limit_val", "strict",
      "out", "resume", "metrics", "trace", "recipe", "classes", "class_names", "model_text",
      "device", "devices", "threads", "compute_threads", "log_every", "checkpoint_every",
      "check_replicas", "collective_timeout", "keep", "kernel_plan"};
  return keys;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : builtins()) names.push_back(name);
  return names;
}

std::string recipe_text(const std::string& name_or_file) {
  const auto it = builtins().find(name_or_file);
  if (it != builtins().end()) return it->second;
  if (ends_with(name_or_file, ".json")) {
    std::ifstream in(name_or_file);
    USER_CHECK(in, "--recipe " << printable(name_or_file) << ": cannot read the file");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::string names;
  for (const std::string& n : recipe_names()) names += (names.empty() ? "" : ", ") + n;
  USER_CHECK(false, "--recipe " << printable(name_or_file) << ": no such recipe (built in: "
                                << names << "; or a .json file of options)");
  return {};
}

TrainConfig apply_recipe(const TrainConfig& cli, const std::vector<std::string>& given) {
  if (cli.recipe.empty()) return cli;
  const std::string where = "--recipe " + printable(cli.recipe);
  nlohmann::json recipe;
  try {
    recipe = nlohmann::json::parse(recipe_text(cli.recipe));
  } catch (const nlohmann::json::exception& e) {
    USER_CHECK(false, where << ": not valid JSON: " << printable(e.what()));
  }
  USER_CHECK(recipe.is_object(), where << ": a recipe is a JSON object of options, got "
                                       << recipe.type_name());
  nlohmann::json merged = cli;
  for (auto it = recipe.begin(); it != recipe.end(); ++it) {
    USER_CHECK(merged.contains(it.key()),
               where << ": '" << printable(it.key()) << "' is not an option");
    USER_CHECK(!refused_keys().count(it.key()),
               where << ": '" << it.key() << "' is not the recipe's to set (a recipe says how to "
                     << "train, not on what data, where, or on which devices)");
    if (std::find(given.begin(), given.end(), it.key()) == given.end())
      merged[it.key()] = it.value();
  }
  try {
    return merged.get<TrainConfig>();
  } catch (const Error& e) {
    rethrow_with_context(e, where);
  }
  return cli;
}

}  // namespace cutrain
