// Editing manifests the way a person would: a document that must change is
// changed at the positions the reader records, only on the lines that must
// change; everything else (comments, quoting, flow style, anchors, line
// ends, JSON indentation) stays byte for byte.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest {

// Replace `length` bytes at `offset` of the source text with `text`.
struct TextEdit {
  std::size_t offset = 0;
  std::size_t length = 0;
  std::string text;
};

struct DocumentEdit {
  std::vector<TextEdit> edits;  // sorted, not overlapping
  // The edits could not be made in place (say, an edited node is anchored
  // and used elsewhere): the document is written out whole instead, which
  // still reads back to `updated` but loses its comments and layout.
  bool rewritten = false;
};

// The edits that turn `document` (as read from document.source) into
// `updated`. Keys are changed, or added after their siblings at their
// indentation; a value keeps its quoting style where it still reads back
// the same; new collections take the style of their parent (flow inside
// flow, JSON inside JSON). An alias is expanded only where a change goes
// through it. The result is checked: the edited document reads back as
// exactly `updated`, else the document is rewritten whole.
DocumentEdit edit_document(const Document& document, const Json& updated);

// The same for several documents of one source, from one parse of it: the
// documents should come in increasing index order (a document before the
// last one edited costs a parse from the start). edit_document on each
// document of a file of thousands would re-read the file up to each one:
// quadratic.
class SourceEditor {
 public:
  explicit SourceEditor(std::shared_ptr<const std::string> source);
  ~SourceEditor();
  SourceEditor(const SourceEditor&) = delete;
  SourceEditor& operator=(const SourceEditor&) = delete;
  DocumentEdit edit(const Document& document, const Json& updated);
  // The same, freeing document.value as soon as it is no longer needed
  // (before the edited text is read back), to lower the peak on a large one.
  DocumentEdit edit(Document&& document, const Json& updated);

  // A List read item by item (ListItems::OneByOne) is edited item by item:
  // memory bounded by the largest item, not the List. True when the items
  // of document `index` can be (one `items` sequence, no anchor or alias
  // in the document): then edit_item edits them, in any order, and the
  // document itself gets no edit(). False: edit() it, read whole.
  bool edits_items(int index);
  // `item` is one of the items of that document, as handed out.
  DocumentEdit edit_item(Document&& item, const Json& updated);

 private:
  DocumentEdit edit(const Document& document, Json* release, const Json& updated);
  bool skip_to(int index);
  struct State;
  std::unique_ptr<State> state_;
};

// Applies sorted, non-overlapping edits.
std::string apply_edits(std::string_view text, const std::vector<TextEdit>& edits);

// A unified diff (`diff -u`, 3 lines of context) of `text` against `text`
// with `edits` applied; empty when there are no edits.
std::string unified_diff(std::string_view text, const std::vector<TextEdit>& edits,
                         std::string_view old_name, std::string_view new_name);
// The same, written to `out` hunk by hunk (the diff of a large List is
// larger than the List).
void write_unified_diff(std::ostream& out, std::string_view text,
                        const std::vector<TextEdit>& edits, std::string_view old_name,
                        std::string_view new_name);

}  // namespace gracekeeper::manifest
