// What the documents' checks share (docs_test.cpp: the citations; kernel_fields_test.cpp: the
// kernel files' five fields): a file's text, the repository's own documents and sources, and
// the file a citation leads to.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace cutrain_test {

std::string read_all(const std::filesystem::path& p);
bool ends_with(const std::string& s, const std::string& tail);
// The file a citation names: against the citing file's folder, then the root (relative to
// root). Empty when it is not a citation (an anchor alone; a path that leaves the repository
// from the citing folder, or into the workplace's ../shared/); "?" when it resolves nowhere.
std::string resolve(const std::filesystem::path& root, const std::string& doc,
                    const std::string& cited);
// The repository's documents and sources (.md .h .cpp .cu .cuh .py .sh), relative to root,
// skipping what is not its own (build/, bin/, bundle/, runs/, data-cache/, dot folders,
// bench/results/).
std::vector<std::string> repository_files(const std::filesystem::path& root);

}  // namespace cutrain_test
