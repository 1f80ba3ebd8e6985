// defines: classes matched by name between data and a model: class_mapping, open_source_for_model
// (--val, eval and predict data with labels in the model's classes) and run_list_options (how
// a run reads its lists once its classes are known).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/image_list.h"
#include "data/source.h"
#include "train/setup/config.h"

namespace cutrain {

// Classes matched by name. A data set's labels index its own class names (classes.txt
// beside a list, the folders of a folder of class folders, a pack's class_names); a model's
// outputs index the model's (the training run's class_names, kept in every checkpoint). When
// both sides name their classes, a label means its name: class_mapping returns, for each
// data label, the model's class of the same name, and refuses (UserError, both lists shown)
// names the model lacks or a different set of names. When a side has no names, labels are
// indices, and must be below the model's class count. A model's names that are just "0",
// "1", ... (what a run whose training data named no classes gets) count as no names, unless
// the data's names are those very strings. Returns {} when labels are indices or when the
// names are in the same order (nothing to map).
std::vector<int32_t> class_mapping(const std::vector<std::string>& data_names,
                                   const std::vector<std::string>& model_names,
                                   const std::string& data_what, const std::string& model_what);

// The data at `path` (open_source) with labels in the model's classes: by name when both name
// their classes, else as indices, checked against the model's class count.
std::shared_ptr<const SampleSource> open_source_for_model(
    const std::string& path, const ImageSpec& spec, int64_t limit,
    const std::vector<std::string>& model_names, const std::string& model_what,
    const ListOptions& lists = {});

// How a run reads its lists once its classes are known: --csv-columns, and class names in a
// list resolved against the run's classes (c.class_names, "the training classes") by name.
// So a validation list of names maps to the training classes, not to its own sorting, and
// eval and predict (given the checkpoint's configuration) map names as the run did.
ListOptions run_list_options(const TrainConfig& c);

}  // namespace cutrain
