// defines: the run's data as SampleSources (data/source.h), and views of them: open_source (an
// image list, a CSV list, a folder of class folders or an HDF5 pack, optionally only its first
// N samples), subset_source (some samples, in a given order), relabel_source (labels mapped),
// data_class_names (the class names stored with the data) and label_count.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image_list.h"
#include "data/source.h"

namespace cutrain {

// Does the file start with the HDF5 signature? (A pack, whatever its name.)
bool is_hdf5_file(const std::string& path);

// The data at `path` as the loader reads it, with `spec`: a pack (PackSource) when the file is
// HDF5, else an image list, a CSV list or a folder with a folder per class (ListSource), read
// with `lists` (data/image_list.h; a pack ignores it). limit > 0 keeps only the first `limit`
// samples (in list or pack order): what --limit-train and --limit-val do, for quick runs.
std::shared_ptr<const SampleSource> open_source(const std::string& path, const ImageSpec& spec,
                                                int64_t limit = 0,
                                                const ListOptions& lists = {});

// The samples `indices` of another source, in that order.
std::shared_ptr<const SampleSource> subset_source(std::shared_ptr<const SampleSource> all,
                                                  std::vector<int64_t> indices);

// `source` with each label k read as map[k] (an empty map: `source` itself).
std::shared_ptr<const SampleSource> relabel_source(std::shared_ptr<const SampleSource> source,
                                                   std::vector<int32_t> map);

// The class names stored with the data (classes.txt beside a list, a list's own sorted class
// names, the folder names of a folder of class folders, a pack's class_names), or empty.
std::vector<std::string> data_class_names(const std::string& path, const ListOptions& lists = {});

// Largest label + 1 of a source: the class count when no names are stored.
int label_count(const SampleSource& s);

}  // namespace cutrain
