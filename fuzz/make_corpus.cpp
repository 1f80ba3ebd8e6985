// make_corpus ROOT: writes the fuzz targets' seed corpora into ROOT/<target>/ (fuzz/corpus.h)
// and prints how many seeds each target got. Run by `make fuzz` before the targets.
#include <cstdio>
#include <exception>
#include <map>

#include "fuzz/corpus.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s ROOT\n", argv[0]);
    return 2;
  }
  try {
    std::map<std::string, int> count;
    for (const cutrain_fuzz::Seed& s : cutrain_fuzz::write_seed_corpus(argv[1])) count[s.target]++;
    for (const auto& [target, n] : count) std::printf("corpus: %-18s %d seeds\n", target.c_str(), n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
