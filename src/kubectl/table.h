// Table: columns aligned with two spaces between them, as kubectl prints.
// Thread-compatible.
#pragma once

#include <string>
#include <vector>

namespace tessera::kubectl {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  // A row with fewer cells than the header is padded; more cells are kept.
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t rows() const { return rows_.size() - 1; }
  // Every row on its own line; the last column is not padded.
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tessera::kubectl
