// defines: write_atomically (a file appears whole under its final name, or not at all),
// write_file_atomically (the same for bytes in memory),
// temp_path_for and parse_temp_name (the temporary file's name), remove_stale_temp_files,
// fsync_path.
//
// The recipe, shared by the pack writer and the checkpoints:
//   1. write the data to `<path>.tmp-<pid>` beside the final path and close it;
//   2. fsync it, so its data reach the disk before its new name does (after a power cut the
//      final name never points at unwritten blocks);
//   3. rename it over `path`: atomic within one file system, so a reader opening `path` gets
//      the old file or the whole new one, and a reader that has the old one open keeps it;
//   4. fsync the folder, so the rename itself is durable.
// A process killed meanwhile leaves its temporary file and nothing under the final name;
// remove_stale_temp_files deletes such leftovers once their process is gone.
//
// The temporary name holds the process id only, so one process must not write the same final
// path from two threads at once (the pack writer and the checkpoint writer never do).
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace cutrain {

// "<path>.tmp-<this process's id>"
std::string temp_path_for(const std::string& path);

// When `name` (a file name, without its folder) is a temporary file of this scheme,
// "<final>.tmp-<pid>", sets final_name and pid and returns true.
bool parse_temp_name(const std::string& name, std::string* final_name, long* pid);

// Removes the temporary files in `dir` whose final name satisfies `ours` and whose process no
// longer exists. A live process's file (a writer racing us) is left alone.
void remove_stale_temp_files(const std::string& dir,
                             const std::function<bool(const std::string& final_name)>& ours);

// open + fsync + close of a file (or, with is_dir, a folder); throws cutrain::Error naming it.
void fsync_path(const std::string& path, bool is_dir = false);

// Steps 1-4 above: removes stale temporary files of `path`, calls write(tmp), which must
// create `tmp`, write it and close it (throwing on any failure), then fsyncs, renames and
// fsyncs the folder. When write or a later step throws, the temporary file is removed and the
// exception passes on; `path` is then untouched.
void write_atomically(const std::string& path,
                      const std::function<void(const std::string& tmp)>& write);

// write_atomically with `n` bytes as the file's contents: every system call checked, a
// failure a UserError naming `path` and the system's reason ("cannot write 'OUT/config.json':
// No space left on device").
void write_file_atomically(const std::string& path, const void* bytes, size_t n);
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace cutrain
