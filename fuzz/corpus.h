// defines: write_seed_corpus, the fuzz targets' starting inputs: real files made by cutrain's
// own writers and by the test suite's file makers (tests/data/test_images.h), written at
// `make fuzz` time by build/fuzz/make_corpus (fuzz/make_corpus.cpp), never committed.
#pragma once
#include <string>
#include <vector>

namespace cutrain_fuzz {

struct Seed {
  std::string target;  // "image_decode", "pack", ... (fuzz/<target>_fuzz.cpp)
  std::string path;    // root/<target>/<name>
  bool good;           // the target's feed must accept it (else: must refuse it cleanly)
};

// Writes every target's seeds into root/<target>/ (folders made as needed) and returns them.
// Targets: image_list, csv_list, image_decode, pack, checkpoint, checkpoint_config, model_spec, idx.
std::vector<Seed> write_seed_corpus(const std::string& root);

}  // namespace cutrain_fuzz
