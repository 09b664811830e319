#include "common/text_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"

namespace gpustripe {

std::string read_text_file(const std::string& path, const char* what) {
  FILE* f = std::fopen(path.c_str(), "rb");
  GS_REQUIRE(f != nullptr, GPUSTRIPE_ERR_IO, "cannot open %s '%s': %s", what, path.c_str(), std::strerror(errno));
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  bool bad = std::ferror(f) != 0;
  std::fclose(f);
  GS_REQUIRE(!bad, GPUSTRIPE_ERR_IO, "cannot read %s '%s'", what, path.c_str());
  return text;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out(1);
  for (char c : text) {
    if (c == sep) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

namespace {
void make_dirs(const std::string& dir) {
  std::string cur = (!dir.empty() && dir[0] == '/') ? "/" : "";
  for (const std::string& part : split(dir, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      GS_THROW(GPUSTRIPE_ERR_IO, "cannot create directory %s: %s", cur.c_str(), std::strerror(errno));
  }
}
}  // namespace

void write_text_file(const std::string& path, const std::string& text) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  GS_REQUIRE(f != nullptr, GPUSTRIPE_ERR_IO, "cannot write %s: %s", tmp.c_str(), std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fclose(f) == 0) && ok;
  GS_REQUIRE(ok, GPUSTRIPE_ERR_IO, "writing %s failed", tmp.c_str());
  GS_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, GPUSTRIPE_ERR_IO, "cannot move %s to %s: %s", tmp.c_str(),
             path.c_str(), std::strerror(errno));
}

}  // namespace gpustripe
