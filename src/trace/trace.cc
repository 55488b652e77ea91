#include "trace/trace.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>

#include "base/files.h"
#include "trace/rng.h"

namespace tessera::trace {
namespace {

std::vector<std::string_view> SplitCsvLine(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (;;) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

// Splits into lines, dropping a trailing '\r' and blank lines; keeps numbers.
std::vector<std::pair<int, std::string_view>> Lines(std::string_view text) {
  std::vector<std::pair<int, std::string_view>> lines;
  int number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) lines.push_back({number, line});
    if (end == text.size()) break;
    start = end + 1;
  }
  return lines;
}

class Table;

// One data row of a Table: its fields by column name, and where it is for
// errors ("<source>:<line>").
class Row {
 public:
  Row(const Table& table, size_t index, std::vector<std::string_view> fields)
      : table_(table), index_(index), fields_(std::move(fields)) {}

  std::string Where() const;
  // The field of `column`; "" when the file has no such column.
  std::string_view Text(const std::string& column) const;
  // The field of `column`, which must not be empty: `what` names it in the
  // error ("empty node name (column 'sn')").
  Result<std::string> Name(const std::string& column, const char* what) const {
    const std::string_view text = Text(column);
    if (text.empty()) return Error{Where() + ": empty " + what + " (column '" + column + "')"};
    return std::string(text);
  }
  // The field of `column` as an integer in [lo, hi].
  Result<int64_t> Integer(const std::string& column, int64_t lo, int64_t hi) const {
    std::string_view s = Text(column);
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
      return Error{Where() + ": column '" + column + "': '" + std::string(s) + "' is not an integer"};
    }
    if (v < lo || v > hi) {
      return Error{Where() + ": column '" + column + "': " + std::to_string(v) + " is out of range [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]"};
    }
    return v;
  }

 private:
  const Table& table_;
  size_t index_;
  std::vector<std::string_view> fields_;
};

class Table {
 public:
  static Result<Table> Open(std::string_view text, const std::string& source,
                            const std::vector<std::string>& required, size_t min_required) {
    Table t;
    t.source_ = source;
    t.lines_ = Lines(text);
    if (t.lines_.empty()) return Error{source + ": empty file (expected a header row)"};
    auto header = SplitCsvLine(t.lines_[0].second);
    for (size_t i = 0; i < header.size(); ++i) t.column_[std::string(header[i])] = i;
    for (size_t r = 0; r < required.size(); ++r) {
      if (t.column_.count(required[r])) continue;
      if (r < min_required) {
        return Error{source + ":" + std::to_string(t.lines_[0].first) + ": missing column '" + required[r] +
                     "' in the header"};
      }
    }
    t.width_ = header.size();
    return t;
  }

  std::string Where(size_t row) const { return source_ + ":" + std::to_string(lines_[row + 1].first); }

  // Reads every data row with `read(const Row&) -> Result<T>`, in order: the
  // values, or the first error; at least one row (else "<source>: no <what>").
  template <typename T, typename Read>
  Result<std::vector<T>> ReadRows(const char* what, Read read) const {
    std::vector<T> out;
    for (size_t r = 0; r + 1 < lines_.size(); ++r) {
      auto fields = SplitCsvLine(lines_[r + 1].second);
      if (fields.size() != width_) {
        return Error{Where(r) + ": " + std::to_string(fields.size()) + " fields, the header has " +
                     std::to_string(width_)};
      }
      TESSERA_ASSIGN_OR_RETURN(T value, read(Row(*this, r, std::move(fields))));
      out.push_back(std::move(value));
    }
    if (out.empty()) return Error{source_ + ": no " + what};
    return out;
  }

  // The index of `column` among a row's fields, or -1.
  int ColumnOf(const std::string& column) const {
    auto it = column_.find(column);
    return it == column_.end() ? -1 : static_cast<int>(it->second);
  }

 private:
  std::string source_;
  std::vector<std::pair<int, std::string_view>> lines_;
  std::map<std::string, size_t> column_;
  size_t width_ = 0;
};

std::string Row::Where() const {
  return table_.Where(index_);
}

std::string_view Row::Text(const std::string& column) const {
  const int i = table_.ColumnOf(column);
  return i < 0 ? std::string_view() : fields_[static_cast<size_t>(i)];
}

// The trace tools' wording: "<path>: cannot open".
Result<std::string> ReadFile(const std::string& path) {
  auto text = files::Read(path);
  if (!text.ok()) return Error{path + ": cannot open"};
  return text;
}

constexpr int64_t kMaxInt = int64_t{1} << 40;

}  // namespace

Result<std::vector<TraceNode>> ParseNodes(std::string_view text, const std::string& source) {
  TESSERA_ASSIGN_OR_RETURN(const Table table,
                           Table::Open(text, source, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}, 5));
  return table.ReadRows<TraceNode>("nodes", [](const Row& row) -> Result<TraceNode> {
    TraceNode n;
    TESSERA_ASSIGN_OR_RETURN(n.name, row.Name("sn", "node name"));
    // Integers are read within bounds that fit their fields.
    TESSERA_ASSIGN_OR_RETURN(n.cpu_milli, row.Integer("cpu_milli", 0, kMaxInt));
    TESSERA_ASSIGN_OR_RETURN(n.memory_mib, row.Integer("memory_mib", 0, kMaxInt));
    TESSERA_ASSIGN_OR_RETURN(n.gpus, row.Integer("gpu", 0, 1024));
    n.model = std::string(row.Text("model"));
    if (n.gpus > 0 && n.model.empty()) return Error{row.Where() + ": node has GPUs but no model"};
    return n;
  });
}

Result<std::vector<TraceTask>> ParseTasks(std::string_view text, const std::string& source) {
  TESSERA_ASSIGN_OR_RETURN(
      const Table table,
      Table::Open(text, source, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"}, 5));
  return table.ReadRows<TraceTask>("tasks", [](const Row& row) -> Result<TraceTask> {
    TraceTask t;
    TESSERA_ASSIGN_OR_RETURN(t.name, row.Name("name", "task name"));
    // Integers are read within bounds that fit their fields.
    TESSERA_ASSIGN_OR_RETURN(t.cpu_milli, row.Integer("cpu_milli", 0, kMaxInt));
    TESSERA_ASSIGN_OR_RETURN(t.memory_mib, row.Integer("memory_mib", 0, kMaxInt));
    TESSERA_ASSIGN_OR_RETURN(t.num_gpu, row.Integer("num_gpu", 0, 1024));
    TESSERA_ASSIGN_OR_RETURN(t.gpu_milli, row.Integer("gpu_milli", 0, 1000));
    if ((t.num_gpu == 0) != (t.gpu_milli == 0)) {
      return Error{row.Where() + ": num_gpu " + std::to_string(t.num_gpu) + " with gpu_milli " +
                   std::to_string(t.gpu_milli) + " (both must be 0 for a CPU-only task, or both positive)"};
    }
    std::string_view spec = row.Text("gpu_spec");
    while (!spec.empty()) {
      size_t bar = spec.find('|');
      std::string_view part = spec.substr(0, bar);
      if (!part.empty()) t.gpu_spec.emplace_back(part);
      if (bar == std::string_view::npos) break;
      spec.remove_prefix(bar + 1);
    }
    return t;
  });
}

Result<std::vector<TraceNode>> LoadNodes(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseNodes(text, path);
}

Result<std::vector<TraceTask>> LoadTasks(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseTasks(text, path);
}

core::NodeState ToNodeState(const TraceNode& node) {
  std::vector<core::Gpu> gpus;
  for (int i = 0; i < node.gpus; ++i) {
    core::Gpu g;
    g.uuid = node.name + "-gpu" + std::to_string(i);
    g.index = i;
    g.model = node.model;
    g.memory_mib = 1000 * kMibPerMilli;
    g.slots = kTraceSlots;
    gpus.push_back(std::move(g));
  }
  return core::NodeState(node.name, std::move(gpus), {node.cpu_milli, node.memory_mib});
}

core::PodRequest ToPodRequest(const TraceTask& task) {
  core::PodRequest pod;
  pod.cpu_milli = task.cpu_milli;
  pod.host_memory_mib = task.memory_mib;
  if (task.num_gpu > 0) {
    core::ContainerRequest c;
    c.name = "main";
    c.gpus = task.num_gpu;
    c.memory_mib = int64_t{task.gpu_milli} * kMibPerMilli;
    c.cores = task.gpu_milli / 10;
    pod.containers.push_back(std::move(c));
    pod.filter.use_types = task.gpu_spec;
  }
  return pod;
}

Workload BuildWorkload(const std::vector<TraceTask>& tasks, int node_count, int64_t capacity_milli,
                       uint64_t seed, double tune) {
  Rng rng(seed);
  std::vector<int> order(tasks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tasks[a].name < tasks[b].name; });
  rng.Shuffle(order);

  const int64_t target = static_cast<int64_t>(tune * static_cast<double>(capacity_milli));
  int64_t total = 0;
  bool any_demand = false;
  for (int i : order) {
    total += tasks[i].demand();
    any_demand = any_demand || tasks[i].demand() > 0;
  }
  Workload w;
  w.arrivals = order;
  if (total <= target) {
    // Inflate: copies drawn with replacement until the next would pass target.
    while (any_demand) {
      int pick = order[rng.Below(order.size())];
      if (total + tasks[pick].demand() > target) break;
      total += tasks[pick].demand();
      w.arrivals.push_back(pick);
    }
  } else {
    // Trim: remove random tasks until the demand fits.
    while (total > target && !w.arrivals.empty()) {
      size_t victim = rng.Below(w.arrivals.size());
      total -= tasks[w.arrivals[victim]].demand();
      w.arrivals.erase(w.arrivals.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  w.node_order.resize(node_count);
  std::iota(w.node_order.begin(), w.node_order.end(), 0);
  rng.Shuffle(w.node_order);
  return w;
}

}  // namespace tessera::trace
