// defines: the training recipes (--recipe NAME or FILE): presets of `cutrain train`'s options
// that a search found (bench/recipe_search.py; its results in bench/results/recipe-fmnist-*),
// and apply_recipe, which lays the options given on the command line over one.
//
// A recipe is a JSON object of configuration keys (train/setup/config.h: the option names,
// '-' as '_'), such as {"epochs": 20, "augment": true, "ema": 0.999}. The built-in ones are
// below in recipe.cpp, each with where its numbers come from; a file of the same form (its
// path ends in .json) is read as well. A recipe says how to train, never on what data or
// where the results go: keys of data, output and resumption (train, val, out, resume, ...)
// are refused, as are unknown keys and values of the wrong type.
//
//   cutrain train --train data/train.txt --val data/test.txt --recipe fmnist --epochs 3
//   // the recipe's values, but 3 epochs: an option given explicitly wins
// config.json holds the resolved values and the recipe's name ("recipe"), so a run says exactly
// how it was made, and --resume repeats it without reading the recipe again.
#pragma once
#include <string>
#include <vector>

#include "train/setup/config.h"

namespace cutrain {

// The built-in recipes' names, sorted.
std::vector<std::string> recipe_names();

// A built-in recipe's JSON text by name, or a .json file's contents; a UserError naming the
// built-in recipes for anything else, or the file and why it cannot be read.
std::string recipe_text(const std::string& name_or_file);

// `cli` (the command line's configuration, every option at its default unless given) with the
// recipe cli.recipe names applied to every key that is not in `given` (option_key of the options
// given): explicit options win. cli.recipe empty: cli unchanged. Throws a UserError naming the
// recipe and the key for a key a recipe may not set, an unknown key or a value of the wrong
// type.
TrainConfig apply_recipe(const TrainConfig& cli, const std::vector<std::string>& given);

}  // namespace cutrain
