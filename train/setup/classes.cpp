// Classes matched by name (see classes.h).
#include "train/setup/classes.h"

#include <map>
#include <set>

#include "kernels/check.h"
#include "kernels/printable.h"
#include "train/setup/sources.h"

namespace cutrain {

namespace {

bool numbered(const std::vector<std::string>& names) {  // "0", "1", ..., "K-1"
  for (size_t k = 0; k < names.size(); k++)
    if (names[k] != std::to_string(k)) return false;
  return true;
}

std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t k = 0; k < names.size(); k++) s += (k ? ", " : "") + printable(names[k]);
  return s;
}

}  // namespace

std::vector<int32_t> class_mapping(const std::vector<std::string>& data_names,
                                   const std::vector<std::string>& model_names,
                                   const std::string& data_what, const std::string& model_what) {
  if (data_names.empty() || model_names.empty()) return {};
  if (numbered(model_names) &&
      std::set<std::string>(data_names.begin(), data_names.end()) !=
          std::set<std::string>(model_names.begin(), model_names.end()))
    return {};  // the model's names are only numbers: labels are indices
  std::map<std::string, int32_t> model_index;
  for (size_t k = 0; k < model_names.size(); k++) model_index[model_names[k]] = int32_t(k);
  std::vector<int32_t> map(data_names.size());
  std::vector<std::string> unknown;
  for (size_t k = 0; k < data_names.size(); k++) {
    const auto it = model_index.find(data_names[k]);
    if (it == model_index.end()) unknown.push_back(data_names[k]);
    else map[k] = it->second;
  }
  USER_CHECK(unknown.empty() && data_names.size() == model_names.size(),
             printable(data_what)
                 << " names other classes than " << printable(model_what) << ": "
                 << (unknown.empty() ? "" : "the model has no class " + name_list(unknown) + "; ")
                 << data_names.size() << " in the data (" << name_list(data_names) << "), "
                 << model_names.size() << " in the model (" << name_list(model_names)
                 << "). Classes are matched by name: give data with the model's classes");
  bool identity = true;
  for (size_t k = 0; k < map.size(); k++) identity = identity && map[k] == int32_t(k);
  return identity ? std::vector<int32_t>{} : map;
}

std::shared_ptr<const SampleSource> open_source_for_model(
    const std::string& path, const ImageSpec& spec, int64_t limit,
    const std::vector<std::string>& model_names, const std::string& model_what,
    const ListOptions& lists) {
  auto s = open_source(path, spec, limit, lists);
  std::vector<int32_t> map =
      class_mapping(data_class_names(path, lists), model_names, path, model_what);
  if (map.empty()) {  // labels are indices (or already in the model's order)
    const int top = label_count(*s) - 1;
    USER_CHECK(model_names.empty() || top < int(model_names.size()),
               printable(path) << ": labels go up to " << top << " but " << printable(model_what)
                               << " has " << model_names.size() << " classes");
  }
  return relabel_source(std::move(s), std::move(map));
}

ListOptions run_list_options(const TrainConfig& c) {
  ListOptions o;
  o.csv_columns = c.csv_columns;
  o.classes = c.class_names;
  o.classes_source = "the training classes";
  return o;
}

}  // namespace cutrain
