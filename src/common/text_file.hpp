// Whole-file reads and writes, and splitting text, without C++ iostreams.
// Why not iostreams: on the GPU machine a Python process that had imported numpy
// (or torch) crashed inside libstdc++'s stream number formatting called from this
// library (std::ostream::operator<<(long) in Topology::fingerprint, seen under
// cuda-gdb). C stdio and plain string code do not touch the locale facets that
// clash there, so the library's file and text handling goes through these.
#pragma once
#include <string>
#include <vector>

namespace gpustripe {

// The file's bytes; throws ERR_IO naming `what` and the path when it cannot be read.
std::string read_text_file(const std::string& path, const char* what = "file");
bool file_exists(const std::string& path);
// Creates missing parent directories, writes a temporary file and renames it over
// `path`, so a reader never sees half a file. Throws ERR_IO.
void write_text_file(const std::string& path, const std::string& text);
// "a,b,,c" -> {"a","b","","c"}; an empty text gives one empty field.
std::vector<std::string> split(const std::string& text, char sep);

}  // namespace gpustripe
