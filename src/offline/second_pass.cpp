// The second pass of `plan`: each input's changed documents decoded again,
// their plans applied and the text edited in place (comments and layout
// kept), or every document written out as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/manifest/document.h"
#include "gracekeeper/manifest/edit.h"
#include "gracekeeper/manifest/writer.h"
#include "gracekeeper/memory.h"
#include "gracekeeper/offline/offline.h"

namespace gracekeeper::offline {
namespace {

using manifest::Json;

Json* object_at(Json& document, const std::vector<std::size_t>& items) {
  Json* value = &document;
  for (std::size_t i : items) value = &(*value)["items"][i];
  return value;
}

// Applies the changes of document `document`, the front ones of `changes`,
// to its value, dropping them.
void apply_document_changes(Json& value, int document, Planned& changes,
                            std::chrono::system_clock::time_point now) {
  for (; !changes.empty() && changes.front().address.document == document; changes.pop_front()) {
    const PlannedChange& change = changes.front();
    budget::apply_plan(*object_at(value, change.address.items), change.plan, change.policy_name,
                       now);
  }
}

// The same for item `item` of List `document`, read on its own.
void apply_item_changes(Json& value, int document, std::size_t item, Planned& changes,
                        std::chrono::system_clock::time_point now) {
  for (; !changes.empty() && changes.front().address.document == document &&
         !changes.front().address.items.empty() && changes.front().address.items.front() == item;
       changes.pop_front()) {
    const PlannedChange& change = changes.front();
    const std::vector<std::size_t> rest(change.address.items.begin() + 1,
                                        change.address.items.end());
    budget::apply_plan(*object_at(value, rest), change.plan, change.policy_name, now);
  }
}

// The edits of one input, in the order they are made (increasing offsets),
// kept compactly until they are applied: their texts side by side in blocks
// rather than one allocation each. A List of 25,000 Deployments has about
// 100,000 edits; as a vector of TextEdit they cost over twice the text they
// add.
class EditLog {
 public:
  void add(manifest::TextEdit&& edit) {
    const std::size_t size = edit.text.size();
    if (blocks_.empty() || blocks_.back().capacity() - blocks_.back().size() < size) {
      blocks_.emplace_back();
      blocks_.back().reserve(std::max(kBlock, size));
    }
    entries_.push_back({edit.offset, edit.length, blocks_.size() - 1, blocks_.back().size(), size});
    blocks_.back() += edit.text;
    added_ += size;
  }

  // As manifest::apply_edits: reserved exactly, clamped, never thrown.
  // The log is emptied as it goes, each block freed once it is copied:
  // the edited text grows as the log shrinks.
  std::string apply(std::string_view text) {
    std::string out;
    out.reserve(text.size() + added_);
    std::size_t at = 0;
    std::size_t freed = 0;  // blocks freed so far
    for (; !entries_.empty(); entries_.pop_front()) {
      const Entry& e = entries_.front();
      for (; freed < e.block; ++freed) std::string().swap(blocks_[freed]);
      const std::size_t offset = std::clamp(e.offset, at, text.size());
      out.append(text.substr(at, offset - at));
      out.append(blocks_[e.block], e.start, e.size);
      at = offset + std::min(e.length, text.size() - offset);
    }
    out.append(text.substr(at));
    *this = EditLog();
    return out;
  }

  // For --diff, which wants them as they were.
  std::vector<manifest::TextEdit> edits() const {
    std::vector<manifest::TextEdit> out;
    out.reserve(entries_.size());
    for (const auto& e : entries_) {
      out.push_back({e.offset, e.length, blocks_[e.block].substr(e.start, e.size)});
    }
    return out;
  }

 private:
  static constexpr std::size_t kBlock = 1u << 20;
  struct Entry {
    std::size_t offset, length, block, start, size;
  };
  std::deque<Entry> entries_;       // no copy of them all as a vector grows
  std::deque<std::string> blocks_;  // each reserved once, never moved
  std::size_t added_ = 0;
};

// The second pass over one input: each document with changes is decoded
// again, the plans applied, and the text edited; the rest is left alone.
struct EditedSource {
  EditLog edits;
  std::vector<std::string> rewritten;  // positions of documents written whole
};

// Document `index` of a source, read again whole (a List whose items could
// not be edited one by one).
std::optional<manifest::Document> read_whole(const SourceText& source, int index) {
  std::optional<manifest::Document> found;
  (void)manifest::for_each_document(source.text, source.name, [&](manifest::Document&& document) {
    if (document.index < index) return true;
    if (document.index == index) found = std::move(document);
    return false;
  });
  return found;
}

// The second pass over one input, as for_each_document hands out its
// documents: those with changes are edited. The changes are dropped as they
// are applied (the front one is the next to apply).
class SourceEdit {
 public:
  SourceEdit(const SourceText& source, Planned& changes, std::chrono::system_clock::time_point now)
      : source_(source), changes_(changes), now_(now), editor_(source.text) {}

  // for_each_document's callback: false once no change is left.
  bool document(manifest::Document&& document) {
    if (changes_.empty()) return false;
    if (changes_.front().address.document != document.index) return true;
    if (document.item) return list_item(std::move(document));
    const int index = document.index;
    if (whole_list_ == index) {
      if (auto whole = read_whole(source_, index)) edit_whole(std::move(*whole));
    } else if (by_items_ != index) {
      edit_whole(std::move(document));
    } else if (document.items_recalled && document.value.contains("items")) {
      recalled_items(document);
    }
    // Changes left for a List edited item by item would be for items
    // out of order, which the first pass never gives.
    while (!changes_.empty() && changes_.front().address.document == index) {
      changes_.pop_front();
    }
    return true;
  }

  EditedSource take() { return std::move(out_); }

 private:
  // An item of a List: edited on its own when the List's items can be.
  bool list_item(manifest::Document&& item) {
    const ObjectAddress& address = changes_.front().address;
    if (address.items.empty() || address.items.front() != *item.item) return true;
    if (whole_list_ == item.index) return true;
    if (by_items_ != item.index) {
      if (!editor_.edits_items(item.index)) {
        whole_list_ = item.index;
        return true;
      }
      by_items_ = item.index;
    }
    edit_item(std::move(item));
    return true;
  }

  // Items handed out, then taken back (a JSON-looking text that only the
  // YAML reader reads): the rest come with the List.
  void recalled_items(manifest::Document& document) {
    Json& items = document.value["items"];
    while (!changes_.empty() && changes_.front().address.document == document.index &&
           !changes_.front().address.items.empty() &&
           changes_.front().address.items.front() < items.size()) {
      const std::size_t k = changes_.front().address.items.front();
      edit_item(manifest::Document{std::move(items[k]), document.position, document.index,
                                   document.source, k, false});
    }
  }

  // The changes of one document: applied to it, and its text edited.
  void edit_whole(manifest::Document&& document) {
    Json updated = document.value;
    apply_document_changes(updated, document.index, changes_, now_);
    const manifest::Position where = document.position;
    keep(editor_.edit(std::move(document), updated), where);
  }

  // The changes of one item of a List, whose items are edited one by one.
  void edit_item(manifest::Document&& item) {
    Json updated = item.value;
    apply_item_changes(updated, item.index, *item.item, changes_, now_);
    const manifest::Position where = item.position;
    keep(editor_.edit_item(std::move(item), updated), where);
  }

  void keep(manifest::DocumentEdit&& edit, const manifest::Position& where) {
    if (edit.rewritten) out_.rewritten.push_back(where.format());
    for (auto& e : edit.edits) out_.edits.add(std::move(e));
  }

  const SourceText& source_;
  Planned& changes_;
  std::chrono::system_clock::time_point now_;
  manifest::SourceEditor editor_;
  EditedSource out_;
  // The List being read: edited whole (read again), or item by item.
  std::optional<int> whole_list_, by_items_;
};

// The changes of a source are dropped as they are applied (the front one
// is the next to apply).
EditedSource edit_source(const SourceText& source, Planned& changes,
                         std::chrono::system_clock::time_point now) {
  SourceEdit edit(source, changes, now);
  // A List is read item by item, and its items edited one by one: memory
  // bounded by the largest item, not by the List (decoded, a List costs
  // 15x its text). When its items cannot be edited so, the List is edited
  // whole, read again.
  (void)manifest::for_each_document(
      source.text, source.name,
      [&edit](manifest::Document&& document) { return edit.document(std::move(document)); }, {},
      nullptr, manifest::ListItems::OneByOne);
  return edit.take();
}

// Every line of `text` after the first indented by `pad` (JSON strings hold
// no raw line break, so this only moves the lines of the dump).
std::string indented(std::string_view text, std::string_view pad) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

std::string dumped(const Json& value) {
  return value.dump(2, ' ', false, Json::error_handler_t::replace);
}

// The Lists of a source whose items are read one by one, each as it comes
// after its items: `items` empty, in its place. Documents whose items were
// taken back (not Lists after all) come whole and are not among them.
std::map<int, Json> list_shells(const SourceText& source) {
  std::map<int, Json> shells;
  std::set<int> with_items;
  (void)manifest::for_each_document(
      source.text, source.name,
      [&](manifest::Document&& document) {
        if (document.item) {
          with_items.insert(document.index);
        } else if (with_items.contains(document.index) && !document.items_recalled) {
          shells.emplace(document.index, std::move(document.value));
        }
        return true;
      },
      {}, nullptr, manifest::ListItems::OneByOne);
  return shells;
}

// A List's dump, cut where its items go: before `[` and after `]`.
std::optional<std::pair<std::string, std::string>> split_at_items(const Json& shell) {
  const std::string text = dumped(shell);
  // A top-level key is the only line that starts with two blanks and `"`.
  constexpr std::string_view marker = "\n  \"items\": []";
  const std::size_t at = text.find(marker);
  if (at == std::string::npos) return std::nullopt;
  return std::pair{text.substr(0, at + marker.size() - 1), text.substr(at + marker.size())};
}

// The documents of one source for write_json, each planned: a List read
// item by item is written so, the text around its items from its shell.
// `open` starts a document of the output.
void write_json_source(const SourceText& source, Planned& planned,
                       std::chrono::system_clock::time_point now, std::string_view pad,
                       const std::function<void()>& open, std::ostream& out) {
  std::optional<std::map<int, Json>> shells;  // read when a first item comes
  int streaming = -1;                         // the List whose items are being written
  std::string after;                          // its text after its items
  bool first_item = true;
  auto write_item = [&](manifest::Document&& item) {
    if (!shells) shells = list_shells(source);
    const auto shell = shells->find(item.index);
    if (shell == shells->end()) return;  // taken back: it comes whole
    if (streaming != item.index) {
      auto parts = split_at_items(shell->second);
      if (!parts) return;  // not reached: the shell has `items`
      open();
      out << indented(parts->first, pad);
      after = std::move(parts->second);
      streaming = item.index;
      first_item = true;
    }
    apply_item_changes(item.value, item.index, *item.item, planned, now);
    out << (first_item ? "\n    " : ",\n    ") << pad
        << indented(dumped(item.value), std::string(pad) + "    ");
    first_item = false;
  };
  (void)manifest::for_each_document(
      source.text, source.name,
      [&](manifest::Document&& document) {
        if (document.item) {
          write_item(std::move(document));
          return true;
        }
        if (streaming == document.index) {
          out << "\n  " << pad << "]" << indented(after, pad);
          streaming = -1;
          return true;
        }
        apply_document_changes(document.value, document.index, planned, now);
        open();
        out << indented(dumped(document.value), pad);
        return true;
      },
      {}, nullptr, manifest::ListItems::OneByOne);
}

// -o json: every document, planned, as one JSON value (a List when several),
// written as it is produced rather than built whole. A List is written item
// by item, as `plan` edits it: decoded whole it costs 10x its text.
void write_json_all(const Loaded& loaded, std::vector<Planned>& changes,
                    std::chrono::system_clock::time_point now, std::ostream& out) {
  const bool list = loaded.document_count != 1;
  const std::string_view pad = list ? "    " : "";
  if (list) out << "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [";
  bool first = true;
  // Starts a document of the output.
  const std::function<void()> open = [&] {
    if (list) out << (first ? "\n    " : ",\n    ");
    first = false;
  };
  for (std::size_t s = 0; s < loaded.sources.size(); ++s) {
    write_json_source(loaded.sources[s], changes[s], now, pad, open, out);  // dropped as applied
  }
  out << (list ? "\n  ]\n}\n" : "\n");
}

// Writes `text` to `path` through a temporary file in the same directory
// and a rename, keeping the file's permissions: never half a file.
std::expected<void, std::string> replace_file(const std::filesystem::path& path,
                                              const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto permissions = fs::status(path, ec).permissions();
  fs::path temporary = path;
  temporary += ".gracekeeper-tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << text;
    file.flush();
    if (!file)
      return std::unexpected(fmt::format("{}: cannot write {}", path.string(), temporary.string()));
  }
  if (!ec) fs::permissions(temporary, permissions, ec);
  fs::rename(temporary, path, ec);
  if (ec) {
    fs::remove(temporary, ec);
    return std::unexpected(
        fmt::format("{}: cannot replace the file: {}", path.string(), ec.message()));
  }
  return {};
}

// Joins inputs into one YAML stream: a `---` between two sources.
void write_source(std::ostream& out, std::string_view text, bool& first) {
  if (!first) {
    if (!(text.starts_with("---") || text.starts_with("%"))) out << "---\n";
  }
  first = false;
  out << text;
  if (!text.empty() && !text.ends_with('\n')) out << '\n';
}

// An input with its edits applied, read back: the text (unless only the
// diff wants it) and, for the diff, the edits.
struct Edited {
  std::vector<manifest::TextEdit> edits;
  std::shared_ptr<const std::string> text;
};

// Edits one input and reads the edited text back (write_edited).
std::expected<Edited, std::string> edit_and_read_back(const Options& options, SourceText& source,
                                                      Planned& planned,
                                                      std::chrono::system_clock::time_point now,
                                                      std::vector<std::string>& rewritten) {
  EditedSource made = edit_source(source, planned, now);
  // Each pass frees tens of thousands of small blocks on a large List;
  // they go back to the system before the next pass allocates anew.
  release_free_memory();
  rewritten.insert(rewritten.end(), made.rewritten.begin(), made.rewritten.end());
  // Only the diff needs the edits, and the text they were made on, again:
  // otherwise they go before the edited text is read back.
  std::vector<manifest::TextEdit> edits;
  std::string applied;
  if (options.diff) {
    edits = made.edits.edits();
    made.edits = EditLog();
    applied = manifest::apply_edits(*source.text, edits);
  } else {
    applied = made.edits.apply(*source.text);
    source.text.reset();
  }
  auto text = std::make_shared<const std::string>(std::move(applied));
  release_free_memory();
  // Each document's edit was read back on its own; the whole file is read
  // again (item by item, documents dropped), because text around a
  // document reads in its context (fuzz findings: a document written whole
  // where the reader said it ends; a blank line after an insertion).
  if (auto again = manifest::for_each_document(
          text, source.name, [](manifest::Document&&) { return true; }, {}, nullptr,
          manifest::ListItems::OneByOne);
      !again) {
    return std::unexpected(
        fmt::format("{}: the edited text would not read back ({}); no file is written: "
                    "`plan -o json` gives the planned objects",
                    source.name, again.error().message));
  }
  // Read back, the edited text is only wanted to be written out.
  if (options.diff && !options.in_place) text.reset();
  return Edited{std::move(edits), std::move(text)};
}

}  // namespace

void write_json(const Loaded& loaded, std::vector<Planned>& changes,
                std::chrono::system_clock::time_point now, std::ostream& out) {
  write_json_all(loaded, changes, now, out);
}

std::expected<std::vector<std::string>, std::string> write_edited(
    const Options& options, Loaded& loaded, std::vector<Planned>& by_source,
    std::chrono::system_clock::time_point now, std::ostream& out) {
  std::vector<std::string> rewritten;
  std::vector<std::optional<Edited>> edited(loaded.sources.size());
  for (std::size_t s = 0; s < loaded.sources.size(); ++s) {
    if (by_source[s].empty()) continue;
    auto made = edit_and_read_back(options, loaded.sources[s], by_source[s], now, rewritten);
    if (!made) return std::unexpected(std::move(made.error()));
    edited[s] = std::move(*made);
  }
  bool first = true;
  for (std::size_t s = 0; s < loaded.sources.size(); ++s) {
    const SourceText& source = loaded.sources[s];
    if (!edited[s]) {
      if (!options.in_place && !options.diff) write_source(out, *source.text, first);
      continue;
    }
    if (options.diff) {
      manifest::write_unified_diff(out, *source.text, edited[s]->edits, "a/" + source.name,
                                   "b/" + source.name);
    }
    if (options.in_place) {
      if (auto written = replace_file(source.path, *edited[s]->text); !written) {
        return std::unexpected(std::move(written.error()));
      }
    } else if (!options.diff) {
      write_source(out, *edited[s]->text, first);
    }
  }
  return rewritten;
}

}  // namespace gracekeeper::offline
