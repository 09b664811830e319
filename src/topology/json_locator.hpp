// Where a JSON path ("gpus[2].nvlink.links") sits in a file's text, so topology
// file errors can name the line. nlohmann/json 3.11 reports positions only for
// syntax errors; this is a small scanner over the already-valid text.
#pragma once
#include <map>
#include <optional>
#include <string>

namespace gpustripe {

class JsonLocator {
 public:
  // `text` must be valid JSON (parse it first): the scanner does not diagnose syntax.
  explicit JsonLocator(const std::string& text);
  // 1-based line where the value at `path` starts. A path that is not in the text
  // (a missing member) gives the line of its nearest existing ancestor.
  int line_of(const std::string& path) const;
  // Path of the first member whose key repeats an earlier key of the same object
  // (nlohmann keeps the last silently; a file with a repeated key is a mistake).
  const std::optional<std::string>& first_duplicate() const { return duplicate_; }

 private:
  std::map<std::string, int> lines_;
  std::optional<std::string> duplicate_;
};

// Path of a member or an element: member_path("gpus[1]", "name") = "gpus[1].name".
std::string member_path(const std::string& parent, const std::string& key);
std::string element_path(const std::string& parent, size_t index);

}  // namespace gpustripe
